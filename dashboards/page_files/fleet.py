from dashboards.shell import run_page
from dashboards.views.fleet import render

run_page(render)
