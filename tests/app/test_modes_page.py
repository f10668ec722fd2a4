"""The Modes page with every control exercised, its URL round trip. Hostile links: test_every_page."""

import pytest

from tests.app.conftest import open_page

PAGE = "pages/2_Modes.py"


def key(name):
    return f"modes.{name}"


def chart(at, index):
    """The plotly figure spec of the index-th chart: 0 grid, 1 saved bytes, 2 validation."""
    import json

    return json.loads(at.get("plotly_chart")[index].proto.spec)


def grid_rows(at) -> dict[str, list]:
    """The grid's cells as drawn, by fact: 1 green, 0 grey, None blank (a cell's rectangle under its fact's marks)."""
    from explorers.modes.figures import HAPPENED

    spec = chart(at, 0)
    rows = {}
    for marks in spec["data"]:
        cells = [None] * len(marks["x"])
        for shape in spec["layout"]["shapes"]:
            if shape["y0"] < marks["y"][0] < shape["y1"]:
                cells[round((shape["x0"] + shape["x1"]) / 2)] = int(shape["fillcolor"] == HAPPENED)
        rows[marks["name"]] = cells
    return rows


@pytest.fixture()
def lab():
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_draws_the_grid_the_memory_bars_and_the_validation_spread(lab):
    assert len(chart(lab, 0)["data"][0]["x"]) == 6 and grid_rows(lab)["builds a graph"] == [1, 0, 0, 1, 0, 0]
    saved = chart(lab, 1)["data"][0]["y"]
    assert saved[0] > saved[3] > 0 and saved[1] == saved[2] == saved[4] == saved[5] == 0
    assert len(chart(lab, 2)["data"]) == 2
    assert len(lab.expander) >= 6


def test_the_saved_bytes_definition_is_stated_where_saved_bytes_appear(lab):
    from explorers import saved

    captions = [c.value for c in lab.caption]
    assert sum(saved.DEFINITION in c for c in captions) >= 2  # under the grid and the saved-bytes chart
    saved_bytes = chart(lab, 1)["data"][0]
    assert saved_bytes["text"][0].endswith("KiB")


def test_dropout_zero_removes_the_dropout_row_facts(lab):
    lab.slider(key=key("p")).set_value(0.0).run()
    assert all(v == 0 for v in grid_rows(lab)["dropout drops units"])
    assert lab.query_params["p"] == "0"


def test_width_batch_momentum_repeats_and_seed_reach_the_run_and_the_link(lab):
    before = chart(lab, 1)["data"][0]["y"][0]
    lab.slider(key=key("width")).set_value(128).run()
    assert chart(lab, 1)["data"][0]["y"][0] > before
    lab.slider(key=key("batch")).set_value(64).run()
    lab.slider(key=key("momentum")).set_value(0.5).run()
    lab.slider(key=key("repeats")).set_value(4).run()
    assert len(chart(lab, 2)["data"][0]["y"]) == 4
    lab.number_input(key=key("seed")).set_value(9).run()
    assert not lab.exception
    assert {k: lab.query_params[k] for k in ("width", "batch", "momentum", "repeats", "seed")} == {
        "width": "128",
        "batch": "64",
        "momentum": "0.5",
        "repeats": "4",
        "seed": "9",
    }


def test_predict_then_reveal(lab):
    lab.radio(key=key("predict")).set_value("Yes").run()
    assert "moved by up to" in lab.success[0].value
    lab.radio(key=key("predict")).set_value("No").run()
    assert lab.error[0].value.startswith("Not quite")


def test_a_copied_link_reopens_the_same_lab():
    at = open_page(PAGE)
    at.slider(key=key("p")).set_value(0.3).run()
    at.slider(key=key("width")).set_value(32).run()
    at.number_input(key=key("seed")).set_value(4).run()
    reopened = open_page(PAGE, dict(at.query_params))
    assert not reopened.warning
    assert [chart(reopened, i) for i in range(3)] == [chart(at, i) for i in range(3)]
