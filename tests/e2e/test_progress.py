"""A learner's practice lasts: a drill score and a running timed set survive a reload and a restarted server.

(Through nginx, past a killed replica: tests/e2e/test_class_server.py.)
"""

from __future__ import annotations

from tests.e2e.conftest import streamlit_server
from tests.e2e.timed_set import ONE_SOLVED, solve_the_first_drill_of_a_new_set


def test_a_drill_score_and_a_timed_set_survive_a_reload_and_a_server_restart(browser, tmp_path):
    env = {"EXPLORER_DATA": str(tmp_path)}
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        with streamlit_server(env=env) as (url, _):
            solve_the_first_drill_of_a_new_set(page, url)
            page.reload()
            page.get_by_text(ONE_SOLVED).wait_for()  # the set, still running, with its solved drill
            assert len(context.cookies()) and "explorer_learner" in {c["name"] for c in context.cookies()}
        with streamlit_server(env=env) as (url, _):  # another port: the browser sends the same cookie
            page.goto(f"{url}/Fix_the_loop")
            page.get_by_text(ONE_SOLVED).wait_for()
            page.goto(f"{url}/Study_plan")
            page.get_by_text("1 drill attempt, 1 solved").first.wait_for()
            assert "explorer_learner" not in page.url and "explorer_learner" not in page.content().split("<body")[0]
    finally:
        context.close()
