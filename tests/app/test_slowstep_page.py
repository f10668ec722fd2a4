"""The Slow step page, every drill and control: each drill from its link with its evidence and questions, an answer
checked right and one wrong (its fix run and judged), the reveal held back until then, measure again, hostile
links, presenting and the notes."""

from __future__ import annotations

import json

import pytest

from explorers.slowstep import lesson
from explorers.slowstep.catalogue import DEFAULT_DRILL, DRILLS, FIXES, label
from explorers.slowstep.experiment import SlowStepOptions, evidence
from tests.app.conftest import open_page

PAGE = "pages/18_Slow_step.py"


def words(at) -> str:
    return " ".join(e.value for e in (*at.markdown, *at.caption, *at.success, *at.error, *at.warning, *at.info))


def radios(at):
    evidence_radio = next(r for r in at.radio if r.key and r.key.endswith("-evidence"))
    fix_radio = next(r for r in at.radio if r.key and r.key.endswith("-fix"))
    return evidence_radio, fix_radio


def kept(at) -> dict:
    from explorers.progress.history import History
    from ui import progress

    return {k: p.right for k, p in History(at.session_state[progress.RECORDS_KEY]).predictions().items()}


def page_run(name: str, seed: int, repeat: int = 0):
    """The run the page showed: the engine's cached result, shared by every session."""
    from ui import runs

    return runs.cached(evidence, SlowStepOptions(name, seed, repeat))


def shown_page(name: str, seed: int, **query: str):
    """The drill's page once its run shows the bottleneck: a busy machine can blur one run, and the page then offers
    to measure again (as a learner would, up to twice)."""
    at = open_page(PAGE, {"drill": DRILLS[name].link_id, "seed": str(seed), **query})
    for _ in range(2):
        if lesson.NOT_SHOWN not in [i.value for i in at.info]:
            break
        at.button(key="measure-again-stage").click().run(timeout=90)
    return at, page_run(name, seed, at.session_state["slowstep.repeat"])


def check(at, evidence_pick: str, fix: str):
    evidence_radio, fix_radio = radios(at)
    evidence_radio.set_value(evidence_pick)
    fix_radio.set_value(fix)
    at.run()
    return at.button(key="check").click().run(timeout=90)


@pytest.mark.parametrize("name", DRILLS)
def test_each_drill_opens_from_its_link_with_its_evidence_and_its_questions_and_nothing_revealed(name):
    drill = DRILLS[name]
    at = open_page(PAGE, {"drill": drill.link_id, "seed": "4"})
    assert not at.exception and not at.error
    assert at.subheader[0].value == label(name)
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) == 2  # the phases and the timeline
    phases = charts[0]["data"][0]
    assert phases["y"] == ["data", "forward", "backward", "optimizer", "other"] and all(v > 0 for v in phases["x"])
    assert at.get("download_button")
    text = words(at)
    assert "Over 24 timed steps" in text and lesson.REVEAL_TITLE not in [s.value for s in at.subheader]
    evidence_radio, fix_radio = radios(at)
    run = page_run(name, 4)
    assert evidence_radio.options == [lesson.evidence_label(run, item) for item in lesson.evidence_choices(run)]
    assert fix_radio.options == [FIXES[k].label for k in drill.options_shown(4)]
    assert FIXES[drill.fix].label in fix_radio.options and len(fix_radio.options) >= 4
    # Nothing on the page or in its link names the bug before the answer.
    assert drill.slow_code not in text and name not in text and name not in str(dict(at.query_params))
    assert at.button(key="check").disabled


def test_a_right_answer_runs_the_fix_says_it_paid_reveals_the_bug_and_is_kept_right():
    name, seed = "checkpoint_every_step", 2
    at, run = shown_page(name, seed)
    assert run.shown
    at = check(at, run.answers[0], DRILLS[name].fix)
    assert not at.exception
    assert any("points at the bottleneck" in s.value for s in at.success)
    assert any(s.value.startswith("Evidence: right. Fix: the one") for s in at.success)
    text = words(at)
    assert "saved" in text and "as fast" in text and DRILLS[name].slow_code in text
    assert lesson.why(name) in text
    assert lesson.REVEAL_TITLE in [s.value for s in at.subheader]
    assert kept(at) == {f"slowstep.{DRILLS[name].link_id}.{seed}": True}
    # The link holds the picks, never whether they were right.
    assert "right" not in str(dict(at.query_params)).lower()


def test_a_wrong_answer_is_graded_wrong_its_fix_judged_by_measurement_and_a_changed_result_flagged():
    name, seed = "float64_model", 1
    at, run = shown_page(name, seed)
    wrong_evidence = next(c for c in lesson.evidence_choices(run) if c not in run.answers)
    at = check(at, wrong_evidence, "larger_lr")
    assert not at.exception
    assert any("does not point at the bottleneck" in e.value for e in at.error)
    assert any(e.value.startswith("Evidence: not the bottleneck. Fix: not the first choice") for e in at.error)
    assert "changed training" in words(at) and "Speed bought with a different result is not a fix" in words(at)
    assert kept(at) == {f"slowstep.{DRILLS[name].link_id}.{seed}": False}


def test_logging_less_is_measured_cheap_on_a_cpu_and_links_the_gpu_traces():
    name, seed = "ema_by_deepcopy", 0
    drill = DRILLS[name]
    assert "log_less" in drill.options_shown(seed)
    at, _ = shown_page(name, seed)
    at = check(at, "phase:other", "log_less")
    assert not at.exception
    links = [link.proto for link in at.get("page_link")]
    text = words(at)
    if "inside the noise" in text:
        assert "costs little" in text and any(link.label == lesson.GPU_LINK_WORDS for link in links)


def test_measure_again_is_a_new_measurement_and_keeps_the_phase_picked():
    at = open_page(PAGE, {"drill": DRILLS["statistics_per_sample"].link_id, "seed": "6"})
    first = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]["x"]
    evidence_radio, _ = radios(at)
    evidence_radio.set_value("phase:data").run()
    at.button(key="measure-again").click().run(timeout=90)
    assert not at.exception
    again = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]["x"]
    assert again != first  # a new run of the same drill: its numbers scatter
    assert radios(at)[0].value == "phase:data"  # a phase bar is in every run; a new run's rows are its own


@pytest.mark.parametrize(
    ("query", "notice"),
    [
        ({"drill": "zzzzzz"}, "`drill` names none of this lab's drills"),
        ({"drill": "'; DROP TABLE"}, "`drill` names none"),
        ({"seed": "-5"}, "`seed` must be between 0 and 9999"),
        ({"seed": "9" * 40}, "`seed`"),
        ({"fix": "rm -rf"}, "`fix` must be one of"),
        ({"evidence": "<script>alert(1)</script>"}, "`evidence` is refused"),
        ({"evidence": "phase:nope"}, "`evidence` is refused"),
        ({"evidence": "op:" + "x" * 5000}, "`evidence`"),
    ],
)
def test_a_hostile_link_gets_a_notice_and_the_default_drill(query, notice):
    at = open_page(PAGE, query)
    assert not at.exception
    assert any(notice in w.value for w in (*at.warning, *at.info, *at.error)), [w.value for w in at.warning]
    assert at.subheader[0].value == label(DEFAULT_DRILL if "drill" in query else DEFAULT_DRILL)


def test_a_link_s_evidence_not_in_the_run_and_a_fix_not_offered_are_dropped_with_a_notice():
    drill = DRILLS["float64_model"]
    offered = set(drill.options_shown(0))
    not_offered = next(k for k in FIXES if k not in offered)
    at = open_page(
        PAGE, {"drill": drill.link_id, "seed": "0", "evidence": "op:data|aten::nothing|", "fix": not_offered}
    )
    assert not at.exception
    warnings = [w.value for w in at.warning]
    assert lesson.UNKNOWN_EVIDENCE in warnings and lesson.UNKNOWN_FIX in warnings
    assert radios(at)[0].value is None and radios(at)[1].value is None


def test_a_link_with_picks_reopens_them_unchecked():
    name, seed = "rows_as_lists", 3
    drill = DRILLS[name]
    at, _ = shown_page(name, seed, evidence="phase:data", fix=drill.options_shown(seed)[0])
    evidence_radio, fix_radio = radios(at)
    assert evidence_radio.value == "phase:data" and fix_radio.value == drill.options_shown(seed)[0]
    assert not at.success and not at.error and not at.button(key="check").disabled


def test_presenting_and_the_notes():
    at = open_page(PAGE, {"presenting": "1"})
    assert not at.exception and len(at.get("plotly_chart")) == 2
    assert any(b.proto.label.startswith("Download") for b in at.get("download_button"))


def test_a_timed_set_opens_its_first_drill_shows_its_clock_and_its_result_says_what_day_7_lists():
    at = open_page(PAGE)
    at.button(key="set-start").click().run(timeout=90)
    assert not at.exception
    numbers = [at.button(key=f"set-{n}") for n in range(1, 6)]
    assert all(numbers) and numbers[0].proto.type == "primary"  # the first drill is open
    at.button(key="set-end").click().run(timeout=90)
    result = [i.value for i in at.info if i.value.startswith("Set ended")]
    assert result and "0 of 5 solved" in result[0] and "day 7 lists them" in result[0]


def test_the_downloaded_trace_is_a_chrome_trace_that_names_no_server_detail():
    import gzip

    at = open_page(PAGE, {"drill": DRILLS["checkpoint_every_step"].link_id, "seed": "5"})
    run = page_run("checkpoint_every_step", 5)
    trace = json.loads(gzip.decompress(run.evidence.trace_gz))
    assert any(e.get("name") == "phase/other" for e in trace["traceEvents"])
    assert trace["host_name"] == "" and trace["traceName"] == "slow-step"
    assert not at.exception


def test_a_second_check_grades_the_new_picks_and_runs_their_fix_while_the_first_answer_stays_kept():
    name, seed = "statistics_per_sample", 8
    at, run = shown_page(name, seed)
    wrong = next(c for c in lesson.evidence_choices(run) if c not in run.answers)
    at = check(at, wrong, "log_less")
    assert any("does not point at the bottleneck" in e.value for e in at.error)
    evidence_radio, fix_radio = radios(at)
    evidence_radio.set_value(run.answers[0])
    fix_radio.set_value(DRILLS[name].fix)
    at.run()
    assert lesson.CHANGED_PICKS in [c.value for c in at.caption]
    at = at.button(key="check").click().run(timeout=90)
    assert any("points at the bottleneck" in s.value for s in at.success)
    assert "saved" in words(at) and lesson.kept_line(False) in [c.value for c in at.caption]
    # Checked: the link holds no picks (the field's empty default).
    assert at.query_params.get("evidence", "") == "" and at.query_params.get("fix", "none") == "none"
