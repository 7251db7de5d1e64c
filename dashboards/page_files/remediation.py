from dashboards.shell import run_page
from dashboards.views.remediation import render

run_page(render)
