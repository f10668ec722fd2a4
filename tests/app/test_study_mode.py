"""Study mode on every lab: an answer card bound to the run, a scored drill, and a self-contained notes file."""

import re

import pytest

from tests.app.conftest import PAGES, open_page
from ui import notes, plan

# A control per lab whose change must change the card's evidence: (widget kind, key, new value).
EVIDENCE_CONTROLS = {
    "pages/1_Autograd.py": ("slider", "autograd.width", 32),
    "pages/2_Modes.py": ("slider", "modes.momentum", 0.9),
    "pages/3_Profiler.py": ("slider", "profiler.data_cost_ms", 20),
    "pages/4_Memory.py": ("select_slider", "memory.batch_size", 256),
    "pages/5_Gradients.py": ("slider", "gradients.scale", 2.0),
    "pages/6_DDP.py": ("slider", "ddp.dataset_size", 9),
    "pages/7_Reproducibility.py": ("toggle", "reproducibility.torch", False),
    "pages/8_Serving.py": ("checkbox", "serving.feature_order", True),
    "pages/10_Real_scale.py": ("segmented_control", "scale.budget", 24),
}
CARDED = [page for page in PAGES if page in EVIDENCE_CONTROLS]


def card_evidence(at) -> str:
    return at.session_state[notes.STATE_KEY].card.evidence


@pytest.mark.parametrize("page", CARDED)
def test_the_answer_card_quotes_this_run_and_changes_with_a_control(page):
    at = open_page(page)
    assert not at.exception
    before = card_evidence(at)
    assert re.search(r"\d", before), "the evidence quotes numbers"
    assert any(h.value == "Answer card" for h in at.subheader)
    kind, key, value = EVIDENCE_CONTROLS[page]
    getattr(at, kind)(key=key).set_value(value).run()
    assert not at.exception and card_evidence(at) != before


@pytest.mark.parametrize("page", CARDED)
def test_the_notes_file_holds_settings_card_figures_and_no_nan(page):
    at = open_page(page)
    collected = at.session_state[notes.STATE_KEY]
    assert collected.charts or collected.graphs
    document = notes.document("Lab", "seed 0 · cpu", {"Why": "- a **bold** `code` line"}, collected)
    assert "seed 0" in document and "Answer card" in document and "<b>bold</b>" in document
    assert "<svg" in document or "data-figure" in document
    assert not re.search(r"\bnan\b", re.sub(r"<script>.*?</script>", "", document, flags=re.S), re.IGNORECASE)


@pytest.mark.parametrize("page", CARDED)
def test_the_drill_comes_before_the_card_that_states_its_answer(page):
    at = open_page(page)
    headings = [h.value for h in at.subheader]
    if "Predict, then reveal" in headings:  # a page asks only when its run can witness the answer
        assert headings.index("Predict, then reveal") < headings.index("Answer card")


def test_predictions_are_scored_once_per_question():
    at = open_page("pages/1_Autograd.py")
    radio = at.radio(key="autograd.predict")
    radio.set_value("Zero").run()
    assert any("0 of 1" in c.value for c in at.caption)
    at.radio(key="autograd.predict").set_value("Twice one pass").run()
    assert any("0 of 1" in c.value for c in at.caption), "a changed mind is revealed, not rescored"
    assert any("Twice one pass" in s.value or "Right" in s.value for s in at.success)


def test_the_study_plan_shows_the_learners_labs_and_answers_and_what_was_done_today():
    at = open_page("pages/1_Autograd.py")
    at.radio(key="autograd.predict").set_value("Zero").run()
    at.switch_page(plan.PAGE).run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Labs opened"] == "1" and metrics["Predictions answered"] == "0 of 1 right"
    today = [c.value for c in at.caption if c.value.startswith(":material/check_circle: Your day 1, ")]
    assert len(today) == 1 and today[0].endswith(": opened Autograd; 1 prediction, 0 right")
    shown = [re.sub(r"\\(.)", r"\1", m.value) for m in at.markdown]  # as rendered: its punctuation is escaped
    assert any("✗ After forward, then backward(retain_graph=True) twice" in text for text in shown)
    fresh = open_page(plan.PAGE)
    assert {m.label: m.value for m in fresh.metric}["Predictions answered"] == "none yet"


def test_the_share_link_names_only_changed_settings_and_reopens_them():
    at = open_page("pages/1_Autograd.py")
    at.slider(key="autograd.width").set_value(8).run()
    at.button(key="do-backward").click().run()
    link = at.code[0].value  # st.context.url has no host under AppTest: the query is what we check
    assert link == "?width=8&steps=forward%2Cbackward"
    reopened = open_page("pages/1_Autograd.py", {"width": "8", "steps": "forward,backward"})
    assert reopened.slider(key="autograd.width").value == 8 and reopened.code[0].value == link


def test_days_that_name_question_numbers_link_those_questions_labs_in_the_lab_maps_order():
    from ui.catalogue import LABS

    order = [entry.slug for entry in LABS]
    numbered = {day.number: day for day in plan.DAYS if "Questions" in day.task}
    assert numbered, "the plan no longer names question numbers: drop this test"
    for day in numbered.values():
        first, last = (int(n) for n in day.task.split("Questions ")[1].split(",")[0].split(" to "))
        continued = [entry.slug for entry in LABS if entry.extends and first <= entry.extends <= last]
        assert list(day.labs) == order[first - 1 : last] + continued, day.task


@pytest.mark.parametrize("slug", ["evidence", "slowstep"])
def test_day_7_links_a_mock_score_on_a_lab_whose_predictions_link_back_with_a_query(slug):
    """A mock score on the GPU evidence or Slow step lab is a MockScore, not a prediction: day 7 raised on it (it read
    a prediction's key to build the link back), whenever a mock set had drawn one of those labs."""
    from streamlit.testing.v1 import AppTest

    from explorers.progress.records import Record
    from tests.app.conftest import ROOT, TIMEOUT_S
    from ui import progress

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    at.switch_page(plan.PAGE)
    at.session_state[progress.UNSAVED_KEY] = [Record.now("mock", slug, {"points": 2})]
    at.run()
    assert not at.exception
    listed = [link.proto.label for link in at.get("page_link") if link.proto.label.startswith("Mock interview, ")]
    assert [label.split(":")[0] for label in listed] == ["Mock interview, 2 of 5"]
