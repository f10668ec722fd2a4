"""Server-side rerun time of every lab page after a control change, as ratios measured in one process.

    make bench

For each page: the median AppTest rerun after moving one control, against (a) a trivial
Streamlit page with one slider, rerun the same way, and (b) the explorer work the page
calls for that change, timed directly. This machine is shared and noisy, so only the
ratios mean anything; each lab adds its scenario to SCENARIOS.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import cycle
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

from explorers import autograd  # noqa: E402

REPEATS = 15
TRIVIAL_PAGE = "import streamlit as st\nst.slider('x', 0, 10, key='x')\n"


@dataclass(frozen=True)
class Scenario:
    page: str
    widget: str  # AppTest accessor: "slider", "selectbox", ...
    key: str
    values: tuple
    explorer_work: Callable[[object], object]  # what the page asks of the explorer for one value


def autograd_work(width: int) -> None:
    options = autograd.AutogradOptions(width=width)
    autograd.explain(autograd.run(options, ["forward"]))
    autograd.run(options, ["forward", "backward_retain", "backward_retain"])  # the predict-then-reveal evidence


SCENARIOS = [Scenario("pages/1_Autograd.py", "slider", "autograd.width", (8, 4), autograd_work)]


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def time_reruns(at: AppTest, widget: str, key: str, values: tuple) -> float:
    samples = []
    for _, value in zip(range(REPEATS), cycle(values), strict=False):
        element = getattr(at, widget)(key=key).set_value(value)
        start = time.perf_counter()
        element.run()
        samples.append(time.perf_counter() - start)
        assert not at.exception, at.exception
    return median_ms(samples)


def time_calls(work: Callable[[object], object], values: tuple) -> float:
    samples = []
    for _, value in zip(range(REPEATS), cycle(values), strict=False):
        start = time.perf_counter()
        work(value)
        samples.append(time.perf_counter() - start)
    return median_ms(samples)


def main() -> None:
    trivial = AppTest.from_string(TRIVIAL_PAGE).run()
    trivial_ms = time_reruns(trivial, "slider", "x", (3, 7))
    print(f"trivial one-slider page rerun: {trivial_ms:.1f} ms (median of {REPEATS})\n")
    print(f"{'page':28} {'rerun ms':>9} {'explorer ms':>12} {'x trivial':>10} {'x explorer':>11}")
    for scenario in SCENARIOS:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.switch_page(scenario.page).run()
        page_ms = time_reruns(at, scenario.widget, scenario.key, scenario.values)
        explorer_ms = time_calls(scenario.explorer_work, scenario.values)
        print(
            f"{scenario.page:28} {page_ms:9.1f} {explorer_ms:12.1f} {page_ms / trivial_ms:10.1f} "
            f"{page_ms / explorer_ms:11.2f}"
        )


if __name__ == "__main__":
    main()
