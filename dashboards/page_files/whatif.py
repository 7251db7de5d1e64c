from dashboards.shell import run_page
from dashboards.views.whatif import render

run_page(render)
