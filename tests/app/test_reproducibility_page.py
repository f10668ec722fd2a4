"""The Reproducibility page: every toggle, slider and upload, the prediction and its links.

Its runs start fresh processes, so the tests reuse settings where they can: the engine caches
results for the whole pytest process.
"""

import json

import pytest

from explorers import engine
from explorers.reproducibility import manifest
from explorers.reproducibility.experiment import CompareOptions, compare_runs
from tests.app.conftest import open_page

PAGE = "pages/7_Reproducibility.py"


def key(name):
    return f"reproducibility.{name}"


def badge(at) -> str:
    shown = [e.value for e in (*at.success, *at.error, *at.warning) if e.value.startswith(("**Bitwise", "**Differs"))]
    assert len(shown) == 1, shown
    return shown[0].strip("*")


def why(at) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("- **Bitwise") or m.value.startswith("- **Differs"))


def test_opens_bitwise_equal_with_charts_resume_and_manifest():
    at = open_page(PAGE)
    assert not at.exception
    assert badge(at).startswith("Bitwise equal: 2 fresh runs")
    assert len(at.get("plotly_chart")) == 3  # losses, differences, resume
    assert any(s.value.startswith("Resumed after 8 steps with full state") for s in at.success)
    assert any(s.value.startswith("The two manifests are identical") for s in at.success)
    assert at.query_params["torch"] == "1" and at.query_params["runs"] == "2" and at.query_params["checkpoint"] == "8"
    assert len(at.dataframe[1].value) == 2  # one row per run


@pytest.mark.parametrize("toggle", ["numpy", "random"])
def test_a_source_the_main_process_draws_from_makes_the_runs_differ(toggle):
    at = open_page(PAGE, {"workers": "0"})
    assert badge(at).startswith("Bitwise equal")
    at.toggle(key=key(toggle)).set_value(False).run()
    assert not at.exception and at.query_params[toggle] == "0"
    assert badge(at).startswith("Differs from step 0 by up to")
    assert "the job drew from it in the main process" in why(at)
    assert list(at.dataframe[0].value["same in every run"]) == ["yes", "yes", "no", "yes"]  # only augmentation


def test_unseeded_torch_differs_from_the_initial_weights_on():
    at = open_page(PAGE, {"torch": "0"})
    assert not at.exception and not at.toggle(key=key("torch")).value
    assert badge(at).startswith("Differs from step 0")
    assert at.dataframe[0].value["same in every run"][0] == "no"  # initial weights
    assert "torch was not seeded" in why(at)


def test_torch_only_with_workers_is_equal_and_the_why_panel_says_which_case_applies():
    at = open_page(PAGE, {"numpy": "0", "random": "0", "seed_workers": "0", "deterministic": "0"})
    assert not at.exception and badge(at).startswith("Bitwise equal")
    text = why(at)
    assert text.count("nothing in the main process drew from it") == 2
    assert "no `worker_init_fn` was needed" in text and "Deterministic algorithms were off" in text


def test_runs_slider_and_run_again_start_new_processes():
    at = open_page(PAGE)
    at.slider(key=key("runs")).set_value(3).run()
    assert not at.exception and at.query_params["runs"] == "3"
    digests = list(at.dataframe[1].value["parameters digest"])
    assert len(digests) == 3 and len(set(digests)) == 1
    at.button[0].click().run()
    assert not at.exception and at.query_params["trial"] == "1"
    assert badge(at).startswith("Bitwise equal: 3 fresh runs")


def test_a_generator_in_init_shows_workers_repeating_each_other():
    at = open_page(PAGE, {"augmentation": "generator_in_init"})
    assert not at.exception and badge(at).startswith("Bitwise equal")
    draws = at.dataframe[2].value
    assert list(draws["made by"]) == ["worker 0", "worker 1"]
    assert draws["first scales drawn"][0] == draws["first scales drawn"][1]
    assert "repeated an earlier draw" in why(at)


def test_forgetting_the_optimizer_state_shows_the_divergence():
    at = open_page(PAGE)
    at.toggle(key=key("keep_optimizer")).set_value(False).run()
    assert not at.exception and at.query_params["keep_optimizer"] == "0"
    shown = [e.value for e in at.error if e.value.startswith("Resumed after 8 steps without optimizer state")]
    assert shown and "from step 9 the losses differ" in shown[0]


def test_the_checkpoint_follows_the_steps():
    at = open_page(PAGE, {"steps": "5", "checkpoint": "9"})
    assert not at.exception
    assert at.slider(key=key("checkpoint")).value == 4 and at.query_params["checkpoint"] == "4"
    assert badge(at).startswith("Bitwise equal: 2 fresh runs, the same loss at all 5 steps")


def test_the_prediction_reveals_the_measured_answer_with_both_runs():
    at = open_page(PAGE)
    at.radio(key=key("predict")).set_value("No, they differ").run()
    assert not at.exception
    reveal = at.error[-1].value
    assert reveal.startswith("Not quite: **Yes, bitwise equal**")
    assert (
        "with torch seeded (numpy, `random` and the workers not) and 2 workers" in reveal
        and "num_workers=0" in reveal
        and "Differs from step" in reveal
    )


@pytest.fixture(scope="module")
def a_manifest():
    return engine.default_engine().run(compare_runs, CompareOptions()).runs[0].manifest


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b" " * (manifest.MAX_BYTES + 10), "64.0 KiB"),
        (b'{"lab": "something else"}', "no `manifest_version`"),
    ],
)
def test_a_bad_manifest_upload_gets_a_clear_error(content, message):
    at = open_page(PAGE)
    at.file_uploader(key=key("manifest_right")).set_value(("bad.json", content, "application/json")).run()
    assert not at.exception
    errors = [e.value for e in at.error if e.value.startswith("**Right manifest")]
    assert errors and message in errors[0]


def test_an_uploaded_manifest_is_compared_field_by_field(a_manifest):
    changed = json.loads(manifest.to_json(a_manifest))
    changed["seeds"]["numpy"] = False
    at = open_page(PAGE)
    upload = manifest.to_json(changed).encode()
    at.file_uploader(key=key("manifest_right")).set_value(("other.json", upload, "application/json")).run()
    assert not at.exception
    assert any(m.value == "**1 field(s) differ:** `seeds.numpy`" for m in at.markdown)
