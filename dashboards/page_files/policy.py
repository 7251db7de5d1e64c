from dashboards.shell import run_page
from dashboards.views.policy import render

run_page(render)
