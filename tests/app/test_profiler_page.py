"""The Profiler page: every control reaches the run and the link; the one-click change; hostile links."""

import json

import pytest

from tests.app.conftest import open_page

PAGE = "pages/3_Profiler.py"


def key(name):
    return f"profiler.{name}"


def phases_chart(at):
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def verdict(at):
    return next(m.value for m in at.markdown if m.value.startswith("### Verdict"))


@pytest.fixture(scope="module")
def lab():
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_default_run_shows_verdict_phases_timeline_operators_and_stopwatch(lab):
    assert "bound" in verdict(lab)
    traces = {t["name"] for t in phases_chart(lab)["data"]}
    assert traces == {"data", "copy", "forward", "backward", "optimizer", "other"}
    assert len(lab.get("plotly_chart")) == 2
    ops, timing = lab.dataframe[0].value, lab.dataframe[1].value
    assert len(ops) > 3 and list(timing.columns) == ["step", "profiler ms", "phases ms", "stopwatch ms"]


def test_every_knob_reaches_the_link(lab):
    lab.select_slider(key=key("width")).set_value(128).run()
    lab.slider(key=key("depth")).set_value(3).run()
    lab.select_slider(key=key("batch_size")).set_value(32).run()
    lab.slider(key=key("num_workers")).set_value(1).run()
    lab.selectbox(key=key("optimizer")).set_value("sgd").run()
    lab.slider(key=key("threads")).set_value(1).run()
    lab.slider(key=key("warmup")).set_value(1).run()
    lab.slider(key=key("active")).set_value(3).run()
    lab.number_input(key=key("seed")).set_value(5).run()
    assert not lab.exception
    assert {
        k: lab.query_params[k] for k in ("width", "depth", "batch_size", "num_workers", "optimizer", "warmup", "active")
    } == {
        "width": "128",
        "depth": "3",
        "batch_size": "32",
        "num_workers": "1",
        "optimizer": "sgd",
        "warmup": "1",
        "active": "3",
    }
    assert len(lab.dataframe[1].value) == 3  # three active steps
    labels = phases_chart(lab)["data"][0]["x"]
    assert labels == ["warm-up 1", "step 1", "step 2", "step 3"]
    # Without CUDA the GPU-only toggles are shown but disabled.
    assert lab.toggle(key=key("pin_memory")).disabled and lab.toggle(key=key("synchronize")).disabled


def test_data_cost_makes_it_data_bound_and_the_suggested_change_is_applied_side_by_side():
    at = open_page(PAGE, {"data_cost_ms": "25", "num_workers": "0", "active": "3", "warmup": "1"})
    assert "data-bound" in verdict(at)
    apply = at.button(key="apply")
    assert "worker" in apply.label
    apply.click().run()
    assert not at.exception and at.session_state[key("num_workers")] == 2
    assert "before" in at.success[0].value and "after" in at.success[0].value
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert titles[:2] == ["Before the change", "After the change"]


def test_profile_again_measures_afresh(lab):
    first = lab.dataframe[1].value
    lab.button(key="again").click().run()
    assert not lab.exception
    assert not lab.dataframe[1].value.equals(first)


def test_predict_then_reveal_runs_the_data_cost_experiment(lab):
    lab.radio(key=key("predict")).set_value("data").run()
    assert "data phase went from" in lab.success[-1].value


@pytest.mark.parametrize(
    "query",
    [
        {"width": "4096"},
        {"batch_size": "0"},
        {"data_cost_ms": "100000"},
        {"num_workers": "999"},
        {"threads": "-3"},
        {"optimizer": "eval('1')"},
        {"active": "1e9"},
    ],
)
def test_hostile_link_values_get_a_notice_and_the_default(query):
    at = open_page(PAGE, {"active": "2", **query})  # short runs; a hostile "active" overrides
    assert not at.exception
    assert any("using the default" in w.value for w in at.warning)
