"""The Serving page with every mismatch, the shift and the seed exercised and its URL round trip."""

import pytest

from tests.app.conftest import open_page

PAGE = "pages/8_Serving.py"
ENTERS_AT = {
    "normalization": "preprocess",
    "feature_order": "preprocess",
    "dtype": "model",
    "train_mode": "model",
    "missing_keys": "model",
    "batch_of_one": "model",
    "threshold": "postprocess",
}


def key(name):
    return f"serving.{name}"


def golden_verdict(at) -> str:
    shown = [e.value for e in (*at.success, *at.warning) if e.value.startswith("**Golden set:**")]
    assert len(shown) == 1, shown
    return shown[0]


def checklist(at) -> str:
    heading = [i for i, s in enumerate(at.subheader) if s.value == "Checklist: the next action"]
    assert heading, "the checklist panel is on the page"
    return " ".join(m.value for m in at.markdown)


@pytest.fixture()
def lab():
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_opens_clean_with_its_figures_metrics_and_downloads(lab):
    assert "match the recorded outputs at every stage" in golden_verdict(lab)
    assert len(lab.get("plotly_chart")) == 2  # the stage boxes and the drift chart
    assert [m.label for m in lab.metric] == ["Validation", "Recorded, live", "Serving, live"]
    assert lab.metric[1].value == lab.metric[2].value
    assert "**No serving mismatch:**" in checklist(lab)
    assert len(lab.dataframe) == 1 and len(lab.table) == 1  # the golden set; the contract, read whole
    labels = [b.proto.label for b in lab.get("download_button")]
    for wanted in ("Golden set (.csv)", "Golden set (.json)", "Pipeline (.json)", "Checkpoint (.pt)", "Notes (.html)"):
        assert any(wanted in label for label in labels), (wanted, labels)
    assert all(lab.query_params[name] == "0" for name in ENTERS_AT) and lab.query_params["shift"] == "0"


@pytest.mark.parametrize("mismatch", list(ENTERS_AT))
def test_each_mismatch_is_one_click_and_caught_where_it_enters(lab, mismatch):
    lab.checkbox(key=key(mismatch)).check().run()
    assert not lab.exception
    assert lab.query_params[mismatch] == "1"
    assert golden_verdict(lab) == f"**Golden set:** the first stage that differs is **{ENTERS_AT[mismatch]}**."
    assert "Nothing to fix" not in checklist(lab)


def test_a_combination_reports_the_earliest_stage_and_lists_both_fixes(lab):
    lab.checkbox(key=key("threshold")).check().run()
    lab.checkbox(key=key("feature_order")).check().run()
    assert golden_verdict(lab).endswith("**preprocess**.")
    text = checklist(lab)
    assert "features 2 and 3 are swapped" in text and "Postprocessing differs from training" in text
    lab.checkbox(key=key("feature_order")).uncheck().run()
    assert golden_verdict(lab).endswith("**postprocess**.")


def test_a_pure_shift_keeps_the_golden_set_clean_and_flags_drift(lab):
    lab.slider(key=key("shift")).set_value(2.0).run()
    assert not lab.exception and lab.query_params["shift"] == "2"
    assert "match the recorded outputs at every stage" in golden_verdict(lab)
    assert "**Live inputs moved:**" in checklist(lab)
    assert float(lab.metric[1].value.rstrip("%")) < float(lab.metric[0].value.rstrip("%"))


def test_the_seed_trains_another_model_and_replays_it_exactly(lab):
    rows_before = sorted(lab.dataframe[0].value["validation row"])
    lab.number_input(key=key("seed")).set_value(3).run()
    assert not lab.exception and lab.query_params["seed"] == "3"
    assert "match the recorded outputs at every stage" in golden_verdict(lab)
    assert sorted(lab.dataframe[0].value["validation row"]) != rows_before  # another model's golden set


def test_the_prediction_reveals_this_runs_evidence(lab):
    lab.checkbox(key=key("dtype")).check().run()
    lab.radio(key=key("predict")).set_value("Live accuracy").run()
    reveal = lab.error[0].value
    assert "Replaying the golden set" in reveal and "golden set first differs at model" in reveal


def test_presenting_keeps_the_mismatches_in_view(lab):
    lab.toggle(key="presenting-toggle").set_value(True).run()
    assert any(e.label == "Settings" for e in lab.expander)
    lab.checkbox(key=key("missing_keys")).check().run()  # still drawn outside the folded settings
    assert not lab.exception and golden_verdict(lab).endswith("**model**.")


def test_a_link_reopens_the_same_state():
    at = open_page(PAGE, {"feature_order": "1", "threshold": "1", "shift": "1.5"})
    assert not at.exception
    assert at.checkbox(key=key("feature_order")).value and at.checkbox(key=key("threshold")).value
    assert at.slider(key=key("shift")).value == 1.5
    assert golden_verdict(at).endswith("**preprocess**.")
