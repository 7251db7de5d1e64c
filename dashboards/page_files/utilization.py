from dashboards.shell import run_page
from dashboards.views.utilization import render

run_page(render)
