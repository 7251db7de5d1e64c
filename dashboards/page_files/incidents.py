from dashboards.shell import run_page
from dashboards.views.incidents import render

run_page(render)
