"""The DDP page: each knob reaches the run and the link, failures show, files load strictly, bad links fall back."""

import json
from pathlib import Path

import pytest

from tests.app.conftest import ROOT, open_page

PAGE = "pages/6_DDP.py"
SAMPLE = ROOT / "assets" / "ddp" / "torchrun-2-nodes.json"


def key(name):
    return f"ddp.{name}"


def text(at) -> str:
    return " ".join(m.value for m in (*at.markdown, *at.success, *at.error, *at.info, *at.caption))


@pytest.fixture(scope="module")
def lab():
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_opens_on_four_ranks_padding_ten_samples(lab):
    assert lab.success[0].value.startswith("**Finished**: 4 ranks")
    assert any("data:image/svg+xml" in h.proto.body for h in lab.get("html"))  # the topology graph
    assert len(lab.get("plotly_chart")) == 4  # sampler, gradients, loss, timeline
    assert "indices 0 (ranks 0 and 2), 1 (ranks 1 and 3) were trained on twice" in text(lab)
    assert lab.query_params["world_size"] == "4" and lab.query_params["dataset_size"] == "10"
    assert any("DataParallel" in m.value and "This run" in m.value for m in lab.markdown)


def test_the_prediction_is_the_issues_question_and_reveals_this_runs_indices(lab):
    radio = lab.radio(key=key("predict"))
    assert radio.label == "10 samples, 4 ranks, drop_last=False: which indices repeat?"
    radio.set_value("A random few").run()
    reveal = lab.error[0].value
    assert "The first ones of the sampler's list" in reveal and "(0, 1)" in reveal and "rank 2: [2, 6, 0]" in reveal


def test_every_run_knob_reaches_the_link_and_the_run():
    at = open_page(PAGE)
    at.slider(key=key("world_size")).set_value(2)
    at.slider(key=key("dataset_size")).set_value(9)
    at.slider(key=key("per_rank_batch")).set_value(3)
    at.slider(key=key("accumulation")).set_value(2)
    at.slider(key=key("epochs")).set_value(3)
    at.slider(key=key("steps")).set_value(5)
    at.select_slider(key=key("bucket_cap_mb")).set_value(0.00005)
    at.toggle(key=key("shuffle")).set_value(True)
    at.toggle(key=key("set_epoch")).set_value(False)
    at.toggle(key=key("drop_last")).set_value(True)
    at.number_input(key=key("seed")).set_value(7)
    at.run()
    assert not at.exception
    expected = {"world_size": "2", "dataset_size": "9", "per_rank_batch": "3", "accumulation": "2", "epochs": "3"}
    expected |= {"steps": "5", "bucket_cap_mb": "5e-05", "shuffle": "1", "set_epoch": "0", "drop_last": "1"}
    assert {k: at.query_params[k] for k in expected} == expected and at.query_params["seed"] == "7"
    shown = text(at)
    assert "drop_last=True trimmed 9 samples to 8" in shown  # drop_last reached the sampler
    assert "Without set_epoch the shuffle is seeded the same every epoch" in shown
    assert "3 per rank × 2 ranks × 2 (k)" in " ".join(m.label for m in at.metric)
    assert "bucket_cap_mb=0.00005" in shown and "under `no_sync()`" in shown
    assert at.radio(key=key("predict")).label.startswith("9 samples, 2 ranks, drop_last=True, shuffled")


def test_the_step_shown_moves_the_gradient_chart():
    at = open_page(PAGE, {"world_size": "2"})
    at.select_slider(key=key("grad_step")).set_value(2).run()
    assert not at.exception and at.query_params["grad_step"] == "2"
    titles = [json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in at.get("plotly_chart")]
    assert "Local vs averaged gradient, step 2" in [t.replace("<br>", " ") for t in titles]  # wrapped to fit


def test_uneven_shards_without_join_show_the_failure_and_with_join_finish():
    at = open_page(PAGE, {"world_size": "2", "dataset_size": "9", "per_rank_batch": "2", "epochs": "1"})
    at.selectbox(key=key("sharding")).set_value("strided")
    at.toggle(key=key("join")).set_value(False).run()
    assert not at.exception and at.query_params["sharding"] == "strided" and at.query_params["join"] == "0"
    assert at.toggle(key=key("shuffle")).disabled and at.toggle(key=key("drop_last")).disabled
    assert at.error and at.error[0].value.startswith("**Failed**")
    assert "gave up after the process group's 3 s timeout" in text(at)
    at.toggle(key=key("join")).set_value(True).run()
    assert at.success[0].value.startswith("**Finished**") and "With Join every rank finished" in text(at)


def test_torchrun_runs_the_same_script():
    at = open_page(PAGE, {"world_size": "1"})
    at.selectbox(key=key("launcher")).set_value("torchrun").run()
    assert not at.exception and at.query_params["launcher"] == "torchrun"
    assert "started by torchrun" in at.success[0].value and "torchrun's agent" in text(at)


def test_the_sample_from_two_torchrun_nodes_loads(lab):
    lab.toggle(key=key("sample")).set_value(True).run()
    assert not lab.exception and lab.query_params["sample"] == "1"
    assert any("2 torchrun nodes" in s.value for s in lab.success)
    assert "as 2 torchrun nodes" in text(lab)
    lab.toggle(key=key("sample")).set_value(False).run()


def test_an_uploaded_results_file_is_shown(lab):
    lab.file_uploader(key=key("upload")).set_value(("mine.json", SAMPLE.read_bytes(), "application/json")).run()
    assert not lab.exception and any("`mine.json`" in s.value for s in lab.success)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not a JSON results file"),
        (json.dumps({"format": "other"}).encode(), "missing key"),
        (b" " * (8 * 2**20 + 1), "over 8.0 MiB"),
    ],
)
def test_a_malformed_upload_gets_a_clear_error_and_nothing_runs(lab, content, message):
    lab.file_uploader(key=key("upload")).set_value(("bad `name`.json", content, "application/json")).run()
    assert not lab.exception
    assert any("is not a DDP lab results file" in e.value for e in lab.error)
    assert any(message in c.value for c in lab.code)


def test_a_file_with_markdown_in_its_host_name_is_refused(lab):
    data = json.loads(Path(SAMPLE).read_text())
    data["ranks"][0]["host"] = "![x](http://example.com/x.png)"
    lab.file_uploader(key=key("upload")).set_value(("evil.json", json.dumps(data).encode(), "application/json")).run()
    assert any("ranks[0].host" in c.value for c in lab.code)
    assert "example.com" not in " ".join(m.value for m in lab.markdown)
