"""The GPU evidence page, every control exercised: each shipped trace, its questions graded and kept, the
upload (a shipped trace, the Profiler lab's own trace, hostile files) and a hostile link."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import pytest

from explorers import evidence
from explorers.evidence import lesson, questions
from explorers.evidence.shipped import DEFAULT, SHIPPED
from tests.app.conftest import open_page

PAGE = "pages/17_GPU_evidence.py"


def words(at) -> str:
    return " ".join(e.value for e in (*at.markdown, *at.caption, *at.success, *at.error, *at.warning, *at.info))


def answers(at) -> dict:
    from explorers.progress.history import History
    from ui import progress

    return {k: p.right for k, p in History(at.session_state[progress.RECORDS_KEY]).predictions().items()}


def answer(at, trace: str | None, question: questions.Question, evidence_pick: str, cause: str):
    widget = f"evidence-{trace or 'upload'}-{question.key}"
    at.radio(key=f"{widget}-evidence").set_value(evidence_pick)
    at.radio(key=f"{widget}-cause").set_value(cause).run()
    return at.button(key=f"{widget}-check").click().run()


def upload(at, name: str, content: bytes):
    at.file_uploader(key="evidence.upload").set_value((name, content, "application/gzip")).run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("trace", SHIPPED)
def test_each_shipped_trace_opens_from_its_link_with_both_figures_its_card_and_its_questions(trace):
    at = open_page(PAGE, {"trace": trace})
    assert not at.exception and not at.error
    reading = evidence.read(trace)
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) == 2 and charts[0]["layout"]["title"]["text"] == "Where the GPU's time went"
    assert lesson.card_line(reading, SHIPPED[trace].source) in words(at)
    assert lesson.split_line(reading) in words(at)
    asked = questions.questions(reading)
    assert len([r for r in at.radio if r.label == "The evidence"]) == len(asked)
    # the verdict, the card and the longest blocking call answer the questions: they wait for the answers
    assert not {lesson.VERDICT_TITLE, "Answer card"} & {s.value for s in at.subheader}
    if reading.blocking:
        assert lesson.longest_blocking_line(reading) not in words(at)


def test_right_answers_are_graded_and_kept_then_the_verdict_and_its_lab_link_show():
    at = open_page(PAGE, {"trace": "embeddings-8"})
    reading = evidence.read("embeddings-8")
    for q in questions.questions(reading):
        answer(at, "embeddings-8", q, q.right_evidence, q.right_cause)
        assert "Evidence: right. Answer: right." in words(at)
    kept = answers(at)
    assert all(kept[f"evidence.embeddings-8.{q.key}"] for q in questions.questions(reading))
    assert {lesson.VERDICT_TITLE, "Answer card"} <= {s.value for s in at.subheader}
    said, _, (_, lab_words) = lesson.verdict(reading)
    assert said in words(at) and any(link.proto.label == lab_words for link in at.get("page_link"))


def test_a_wrong_pick_names_the_evidence_and_the_first_answer_is_the_one_kept():
    at = open_page(PAGE, {"trace": "alexnet"})
    bound = questions.questions(evidence.read("alexnet"))[0]
    wrong_evidence = next(e for e in bound.evidence if e != bound.right_evidence)
    answer(at, "alexnet", bound, wrong_evidence, bound.right_cause)
    assert f"the evidence is “{bound.right_evidence}”" in words(at) and "Answer: right" in words(at)
    answer(at, "alexnet", bound, bound.right_evidence, bound.right_cause)
    assert "Evidence: right. Answer: right." in words(at)
    assert answers(at) == {"evidence.alexnet.bound": False}
    assert "Your first answer, the one kept: not right." in words(at)


def test_check_waits_for_both_picks():
    at = open_page(PAGE)
    q = questions.questions(evidence.read(DEFAULT))[0]
    widget = f"evidence-{DEFAULT}-{q.key}"
    assert at.button(key=f"{widget}-check").disabled
    at.radio(key=f"{widget}-evidence").set_value(q.evidence[0]).run()
    assert at.button(key=f"{widget}-check").disabled
    at.radio(key=f"{widget}-cause").set_value(q.causes[0]).run()
    assert not at.button(key=f"{widget}-check").disabled


@pytest.mark.parametrize("raw", ["../../etc/passwd", "alexnet%00", "ALEXNET", "x" * 500, "<script>"])
def test_a_hostile_link_gets_a_notice_and_the_default_trace(raw):
    at = open_page(PAGE, {"trace": raw})
    assert not at.exception
    assert any("trace" in w.value and "using the default" in w.value for w in at.warning)
    assert at.session_state["evidence.trace"] == DEFAULT


def test_an_uploaded_trace_gets_the_same_reading_graded_not_kept():
    at = open_page(PAGE)
    data = SHIPPED["rocm-loop"].path.read_bytes()
    upload(at, "my trace.json.gz", data)
    reading = evidence.read(data)
    assert lesson.split_line(reading) in words(at) and lesson.NOT_SCORED in words(at)
    assert "your upload `my trace.json.gz`" in words(at)
    q = questions.questions(reading)[0]
    answer(at, None, q, q.right_evidence, q.right_cause)
    assert "Evidence: right. Answer: right." in words(at) and not answers(at)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (pickle.dumps({"segments": []}), "pickle"),
        (b'{"traceEvents": [' * 3000, "nests 6000"),
        (gzip.compress(b"{}"), "no traceEvents"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
    ],
)
def test_a_hostile_upload_is_answered_with_a_message_and_no_figure(content, said):
    at = upload(open_page(PAGE), "a` ![x](http://example.invalid/a.png) `.json", content)
    assert at.error and said in at.error[0].value
    # the chosen trace stays below the message, its choice held until the file is removed
    assert SHIPPED[DEFAULT].title in at.error[0].value and len(at.get("plotly_chart")) == 2
    assert at.selectbox(key="evidence.trace").disabled
    assert "![x]" not in at.error[0].value.replace("`a\\x60 ![x]", "")  # the name shown as code, never as markdown


def test_the_profiler_labs_own_trace_round_trips_to_the_phases_it_showed():
    """Download the Profiler lab's trace, upload it here: the same phases, from its record_function labels."""
    import statistics

    from explorers.profiler.experiment import ProfileOptions, profile
    from explorers.profiler.your_model import LABEL, PHASES

    result = profile(ProfileOptions(seed=11))
    last_round = result.steps[-result.steps_per_round :]
    at = upload(open_page(PAGE), "step-trace.json", Path(result.trace_path).read_bytes())
    reading = evidence.read(Path(result.trace_path).read_bytes())
    labels = dict(reading.labels)
    for phase in PHASES:
        assert labels[LABEL + phase] == pytest.approx(statistics.fmean(s.phases[phase] for s in last_round), abs=1e-3)
    assert len(reading.steps) == result.steps_per_round
    assert "No GPU kernel, copy or set event" in words(at) and "phase/forward" in words(at)
    assert len(at.get("plotly_chart")) == 1


def test_presenting_shows_both_figures_and_plain_tables():
    at = open_page(PAGE, {"present": "1", "trace": "one-step"})
    assert not at.exception and len(at.get("plotly_chart")) == 2 and not at.dataframe and at.table


def test_the_notes_hold_the_reading_and_the_answers():
    at = open_page(PAGE, {"trace": "alexnet"})
    q = questions.questions(evidence.read("alexnet"))[0]
    answer(at, "alexnet", q, q.right_evidence, q.right_cause)
    notes = next(b for b in at.get("download_button") if "notes" in str(b.proto.label).lower())
    assert notes is not None
