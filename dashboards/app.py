"""The dashboard's entry script: `streamlit run dashboards/app.py -- --settings FILE`.

`gpufleet dashboard --config F` writes FILE and starts this (see dashboards.launcher).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent
# (file in page_files/ and URL path, title, icon); the first is the home page at /. (No bare
# strings in this script: Streamlit's magic would print them.)
PAGES = (
    ("fleet", "Fleet", ":material/grid_view:"),
    ("incidents", "Incidents", ":material/warning:"),
    ("jobs", "Jobs", ":material/stacked_line_chart:"),
    ("remediation", "Remediation", ":material/build:"),
    ("policy", "Policy", ":material/policy:"),
    ("utilization", "Utilization & cost", ":material/payments:"),
    ("whatif", "What-if", ":material/science:"),
)


def main() -> None:
    st.set_page_config(page_title="gpufleet", page_icon=":material/memory:", layout="wide")
    pages = [
        st.Page(str(HERE / "page_files" / f"{name}.py"), title=t, icon=i, url_path=name,
                default=k == 0)
        for k, (name, t, i) in enumerate(PAGES)
        if (HERE / "page_files" / f"{name}.py").exists()
    ]  # fmt: skip
    nav = st.navigation(pages)
    nav.run()


main()
