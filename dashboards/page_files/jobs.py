from dashboards.shell import run_page
from dashboards.views.jobs import render

run_page(render)
