"""The Real-scale page with every control exercised, its share link. Hostile links: test_every_page.

GPT-2 small keeps these quick; the default (Llama-3-8B) is opened once, as the issue's headline question.
"""

import re

import pytest

from tests.app.conftest import open_page

PAGE = "pages/10_Real_scale.py"
SMALL = {"model": "gpt2", "seq": "256", "precision": "fp32"}


def key(name):
    return f"scale.{name}"


def verdict(at) -> str:
    shown = [e.value for e in (*at.success, *at.error) if "per GPU: the step peaks at" in e.value]
    assert len(shown) == 1, shown
    return shown[0]


def peak_gib(at) -> float:
    return float(re.search(r"peaks at ([\d,.]+) GiB", verdict(at)).group(1).replace(",", ""))


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.fixture()
def lab():
    at = open_page(PAGE, SMALL)
    assert not at.exception
    return at


def test_llama_3_8b_by_default_shows_the_breakdown_verdict_limits_remedies_and_card():
    at = open_page(PAGE)
    assert not at.exception
    assert at.selectbox(key=key("model")).value == "llama-3-8b"
    assert metrics(at)["Parameters"] == "29.9 GiB"  # 8,030,261,248 fp32 master weights
    assert "Does not fit in 80 GiB per GPU" in verdict(at)
    text = " ".join(m.value for m in at.markdown)
    assert "Largest micro-batch" in text or "No micro-batch fits" in text
    assert "ZeRO's 16 bytes per parameter" in text
    assert [s.value for s in at.subheader if s.value in ("What fits", "Remedies")] == ["What fits", "Remedies"]
    assert len(at.get("plotly_chart")) == 2
    evidence = " ".join(m.value for m in at.markdown if "**Evidence" in m.value)
    (remedies,) = [d.value for d in at.dataframe if "Change" in d.value.columns]
    how = remedies["How"][0]
    assert "Llama-3-8B" in evidence and f"saves the most ({how}): {remedies['Change'][0]}" in evidence
    computed = remedies["Change"].str.startswith("ZeRO")  # sharding is computed from a measured step
    assert (remedies["How"][computed] == "computed from the measured step").all()
    assert (remedies["How"][~computed] == "measured").all()


def shown(at) -> tuple:
    """The verdict, the four metrics and the budget table: what a control must change."""
    return verdict(at), metrics(at), at.dataframe[0].value.to_dict()


def test_every_control_changes_the_measured_step(lab):
    before = shown(lab)
    changes = [
        ("number_input", "batch", 4),
        ("select_slider", "seq", 1024),
        ("radio", "precision", "bf16"),
        ("selectbox", "optimizer", "sgd"),
        ("toggle", "checkpointing", True),
        ("selectbox", "trainable", "head"),
    ]
    for kind, name, value in changes:
        getattr(lab, kind)(key=key(name)).set_value(value).run()
        assert not lab.exception, name
        now = shown(lab)
        assert now != before, f"{name} changed nothing shown"
        before = now
        assert lab.query_params[name] == ("1" if value is True else str(value)), name
    lab.select_slider(key=key("gpus")).set_value(8).run()
    assert shown(lab) == before  # DDP: every GPU holds the whole step
    lab.selectbox(key=key("zero")).set_value(3).run()
    assert shown(lab) != before and lab.query_params["zero"] == "3"
    lab.selectbox(key=key("trainable")).set_value("last").run()
    assert lab.slider(key=key("blocks")).max == 12  # GPT-2 small has 12 blocks
    lab.slider(key=key("blocks")).set_value(1).run()
    assert not lab.exception and lab.query_params["blocks"] == "1"
    assert any("output projection" in i.value for i in lab.info)  # what "the head" is, tied or not
    lab.segmented_control(key=key("budget")).set_value(24).run()
    assert "in 24 GiB per GPU" in verdict(lab)


def test_a_sequence_past_the_models_position_table_is_cut_with_a_notice():
    at = open_page(PAGE, {"model": "bert-base-uncased", "seq": "4096"})
    assert not at.exception
    assert any("512 positions" in i.value for i in at.info)
    assert "sequence 512" in at.get("plotly_chart")[0].proto.spec


def test_sharding_is_labelled_as_computed(lab):
    lab.select_slider(key=key("gpus")).set_value(8).run()
    lab.selectbox(key=key("zero")).set_value(3).run()
    said = " ".join(i.value for i in lab.info)
    assert "computed from the measured step" in said and "largest unit's full parameters" in said


def test_zero_over_one_gpu_says_it_shards_nothing(lab):
    lab.selectbox(key=key("zero")).set_value(2).run()
    assert any("over 1 GPU shards nothing" in i.value for i in lab.info)


def test_the_foreach_step_is_offered_with_adamw_only_and_changes_the_step(lab):
    lab.selectbox(key=key("optimizer")).set_value("adamw").run()
    before = shown(lab)
    lab.toggle(key=key("foreach")).set_value(True).run()
    assert not lab.exception and lab.query_params["foreach"] == "1"
    assert shown(lab) != before
    assert any("foreach=True" in c.value for c in lab.caption)
    lab.selectbox(key=key("optimizer")).set_value("sgd").run()
    assert not lab.exception and not [t for t in lab.toggle if t.key == key("foreach")]


def test_a_link_asking_more_blocks_than_the_model_has_is_cut_to_its_blocks():
    at = open_page(PAGE, {**SMALL, "trainable": "last", "blocks": "100"})
    assert not at.exception and at.slider(key=key("blocks")).value == 12
