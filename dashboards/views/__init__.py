"""One module per page: `render(ctx)` draws it (the files in dashboards/pages/ call these)."""
