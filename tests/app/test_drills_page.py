"""The Fix-the-loop page with every control exercised: drill, seed, lines, fix, check, the timed set, links."""

from __future__ import annotations

import html
import json
import re

import pytest

from explorers import drills
from explorers.drills.catalogue import BY_LINK_ID
from tests.app.conftest import open_page

PAGE = "pages/12_Fix_the_loop.py"


def key(name: str) -> str:
    return f"drills.{name}"


def link(name: str) -> str:
    return drills.DRILLS[name].link_id


def chart(at, index: int) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def main_traces(at) -> list[str]:
    return [trace["name"] for trace in chart(at, 0)["data"]]


def shown_code(at, index: int = 0) -> str:
    """The text of the page's `index`th code block (ui/code.py), without its line numbers."""
    blocks = [h.proto.body for h in at.get("html") if "code-block" in h.proto.body]
    text = re.sub(r"<span class='ln'>[^<]*</span>", "", blocks[index])
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def answer(at, lines, fix: str):
    at.pills(key=key("lines")).set_value([str(n) for n in lines]).run()
    at.radio(key=key("fix")).set_value(fix).run()
    return at.button(key="check").click().run()


@pytest.fixture()
def lab():
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_opens_on_the_first_drill_with_its_symptoms_and_no_answer(lab):
    drill = drills.DRILLS[drills.DEFAULT_DRILL]
    assert main_traces(lab) == ["buggy loop"]  # the correct loop's curve stays hidden
    assert len(lab.get("plotly_chart")) == 4  # loss, gradients, memory, accuracy
    assert shown_code(lab) == drill.source.rstrip() and "def train(bench):" in shown_code(lab)
    assert lab.button(key="check").disabled
    assert len(lab.radio(key=key("fix")).options) == len(drill.options) + 1


@pytest.mark.parametrize("name", sorted(drills.DRILLS))
def test_every_drill_opens_from_a_link_and_the_right_answer_reveals_the_correct_loop(name):
    drill = drills.DRILLS[name]
    at = open_page(PAGE, {"drill": link(name), "seed": "1"})
    assert not at.exception and not at.warning
    assert shown_code(at) == drill.source.rstrip()
    answer(at, drill.bug_lines, drill.fix)
    assert not at.exception
    assert at.success and at.success[0].value.startswith("Right, in 1 attempt")
    assert main_traces(at)[-1] == "correct loop"
    assert any("bit for bit" in m.value for m in at.markdown)
    # the link after solving: the drill's opaque id and the seed, no name, no lines, no fix
    assert {k: v for k, v in at.query_params.items() if k not in ("device", "present")} == {
        "drill": link(name),
        "seed": "1",
    }


def test_a_wrong_fix_is_run_and_shown_beside_the_buggy_loop_and_the_correct_curve_stays_hidden(lab):
    drill = drills.DRILLS[drills.DEFAULT_DRILL]
    answer(lab, drill.bug_lines, "clip")
    assert lab.error and "fix is not the one" in lab.error[0].value
    assert main_traces(lab) == ["buggy loop"]
    fix_chart = chart(lab, 4)
    names = [t["name"] for t in fix_chart["data"]]
    assert names[:2] == ["buggy loop", "your fix"] and "correct loop" not in names  # the page's promise holds
    assert all(
        "correct loop" not in trace["name"]
        for c in range(len(lab.get("plotly_chart")))
        for trace in chart(lab, c)["data"]
    )
    assert any("hides the symptom" in m.value or "does not fix it" in m.value for m in lab.markdown)
    answer(lab, drill.bug_lines, drill.fix)  # the second attempt, right
    assert lab.success[0].value.startswith("Right, in 2 attempts")
    assert [t["name"] for t in chart(lab, 4)["data"]][:2] == ["correct loop", "your fix"]


def test_pytorchs_own_error_is_shown_beside_the_main_figure():
    at = open_page(PAGE, {"drill": link("batchnorm_batch_of_one")})
    assert at.error and "Expected more than 1 value per channel when training" in at.error[0].value
    assert "After 15 logged batches" in at.error[0].value
    assert not open_page(PAGE).error  # a loop that raises nothing shows no error box


def test_lines_with_extras_are_not_right_even_with_the_right_fix(lab):
    drill = drills.DRILLS[drills.DEFAULT_DRILL]
    answer(lab, [*drill.bug_lines, 2], drill.fix)
    assert lab.error and "1 other" in lab.error[0].value


def test_the_seed_and_the_drill_reach_the_run_and_the_link_and_clear_the_answer(lab):
    before = chart(lab, 0)["data"][0]["y"]
    lab.pills(key=key("lines")).set_value(["3"]).run()
    lab.number_input(key=key("seed")).set_value(5).run()
    assert chart(lab, 0)["data"][0]["y"] != before
    assert not lab.pills(key=key("lines")).value and lab.query_params["seed"] == "5"
    lab.selectbox(key=key("drill")).set_value(link("sampler_without_set_epoch")).run()
    assert not lab.exception and lab.query_params["drill"] == link("sampler_without_set_epoch")
    assert shown_code(lab) == drills.DRILLS["sampler_without_set_epoch"].source.rstrip()


def test_a_link_copied_after_solving_reopens_the_drill_without_the_answer():
    at = open_page(PAGE, {"drill": link("detached_body"), "seed": "2"})
    drill = drills.DRILLS["detached_body"]
    answer(at, drill.bug_lines, drill.fix)
    assert at.success
    reopened = open_page(PAGE, dict(at.query_params))
    assert not reopened.warning
    assert not reopened.pills(key=key("lines")).value  # nothing preselected for whoever opens it
    assert reopened.radio(key=key("fix")).value == "none"
    assert not reopened.success and not reopened.error  # the check was this session's, not the link's
    assert chart(reopened, 0)["data"][0]["y"] == chart(at, 0)["data"][0]["y"]


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ({"drill": "rm -rf"}, "drill"),
        ({"drill": "forgot_zero_grad"}, "drill"),  # a drill's name is not its link id
        ({"lines": "3,99", "fix": "shuffle"}, "unknown link settings"),  # old links: the answer is ignored
        ({"fix": "<script>"}, "unknown link settings"),
        ({"seed": "-3"}, "seed"),
    ],
)
def test_a_bad_link_gets_a_notice_and_the_first_drill(query, said):
    at = open_page(PAGE, query)
    assert not at.exception
    assert any(said in w.value for w in at.warning), [w.value for w in at.warning]
    assert at.selectbox(key=key("drill")).value == link(drills.DEFAULT_DRILL)
    assert not at.pills(key=key("lines")).value


def test_a_bad_drill_in_a_link_gets_a_notice_that_lists_no_drill_and_no_fix():
    at = open_page(PAGE, {"drill": "x", "fix": "y"})
    notices = " ".join(w.value for w in at.warning)
    for drill in drills.DRILLS.values():  # the default drill's id only, as the default it opens
        assert drill.name not in notices and (drill.link_id not in notices or drill.name == drills.DEFAULT_DRILL)
    for fix in drills.FIXES:
        assert fix not in notices


def test_two_sessions_on_one_drill_do_not_see_each_others_answers():
    first, second = open_page(PAGE), open_page(PAGE)
    drill = drills.DRILLS[drills.DEFAULT_DRILL]
    answer(first, drill.bug_lines, drill.fix)
    second.run()
    assert first.success and not second.success
    assert main_traces(second) == ["buggy loop"]


def test_a_timed_set_opens_five_drills_and_its_scores_reach_the_study_plan():
    at = open_page(PAGE)
    at.button(key="set-start").click().run()
    assert not at.exception
    assert [b.key for b in at.button if (b.key or "").startswith("set-")][:5] == [f"set-{n}" for n in range(1, 6)]
    first = at.selectbox(key=key("drill")).value
    drill = BY_LINK_ID[first]
    answer(at, drill.bug_lines, drill.fix)
    assert at.success and any("30 s" in m.value for m in at.markdown)  # say it aloud, as in the mock interview
    at.button(key="set-2").click().run()
    assert at.selectbox(key=key("drill")).value != first and not at.success
    at.button(key="set-end").click().run()
    assert at.button(key="set-start")
    at.switch_page("pages/9_Study_plan.py").run()
    assert any("Your five weakest answers" in m.value for m in at.markdown)
    links = [link.proto for link in at.get("page_link") if link.proto.label.startswith("Fix the loop, Drill")]
    assert len(links) == 4 and not any("1 attempt" in link.label for link in links)  # solved at once: not weak
    unsolved = BY_LINK_ID[dict(p.split("=") for p in links[0].query_string.split("&"))["drill"]]
    assert unsolved.title in links[0].label and links[0].page == "Fix_the_loop"  # day 7 links back to it
    assert unsolved.name not in links[0].query_string and unsolved != drill


def test_the_mock_interview_draws_a_drill_as_its_coding_question():
    at = open_page("pages/11_Mock_interview.py")
    links = [link.proto for link in at.get("page_link") if link.proto.label.startswith("Fix the loop:")]
    assert len(links) == 1 and "drill=" in links[0].query_string and links[0].page == "Fix_the_loop"
    link_id = dict(part.split("=") for part in links[0].query_string.split("&"))["drill"]
    drill = BY_LINK_ID[link_id]  # an opaque id: the drill's name, which names its bug, is not in the link
    assert drill.name not in links[0].query_string and drill.title in links[0].label


def test_a_timed_set_shows_which_drill_is_open_and_solved_and_ends_with_a_result_that_keeps_the_unsolved():
    at = open_page(PAGE)
    at.button(key="set-start").click().run()
    first = BY_LINK_ID[at.selectbox(key=key("drill")).value]
    assert at.button(key="set-1").proto.type == "primary" and at.button(key="set-2").proto.type == "secondary"
    answer(at, first.bug_lines, first.fix)
    assert at.button(key="set-1").proto.icon == ":material/check:" and not at.button(key="set-2").proto.icon
    at.button(key="set-end").click().run()
    result = at.info[0].value
    assert result.startswith("Set ended: 1 of 5 solved in 0:") and result.count("Drill ") == 4
    at.switch_page("pages/9_Study_plan.py").run()
    unsolved = [link.proto.label for link in at.get("page_link") if "not answered in a timed set" in link.proto.label]
    assert len(unsolved) == 4


def test_a_timed_set_whose_clock_ran_out_ends_itself_with_its_result():
    import dataclasses
    import time

    at = open_page(PAGE)
    at.button(key="set-start").click().run()
    records = list(at.session_state["_progress_records"])  # the set as the learner's records keep it
    start = next(i for i, r in enumerate(records) if r.kind == "set")
    records[start] = dataclasses.replace(records[start], data={**records[start].data, "started": time.time() - 901})
    at.session_state["_progress_records"] = records
    at.run()
    assert not at.exception and at.info[0].value.startswith("Time is up: 0 of 5 solved in 15:00.")
    assert at.button(key="set-start") and not [b for b in at.button if b.key == "set-end"]
