"""The dashboard's entry script: `streamlit run dashboards/app.py -- --settings FILE`.

`gpufleet dashboard --config F` writes FILE and starts this (see dashboards.launcher).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent
PAGES = (
    ("pages/fleet.py", "Fleet", ":material/grid_view:"),
    ("pages/incidents.py", "Incidents", ":material/warning:"),
    ("pages/jobs.py", "Jobs", ":material/stacked_line_chart:"),
    ("pages/remediation.py", "Remediation", ":material/build:"),
    ("pages/policy.py", "Policy", ":material/policy:"),
    ("pages/utilization.py", "Utilization & cost", ":material/payments:"),
    ("pages/whatif.py", "What-if", ":material/science:"),
)


def main() -> None:
    st.set_page_config(page_title="gpufleet", page_icon=":material/memory:", layout="wide")
    pages = [st.Page(str(HERE / f), title=t, icon=i) for f, t, i in PAGES if (HERE / f).exists()]
    nav = st.navigation(pages)
    nav.run()


main()
