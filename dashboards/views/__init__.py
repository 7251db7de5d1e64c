"""One module per page: `render(ctx)` draws it (the files in dashboards/page_files/ call these)."""
