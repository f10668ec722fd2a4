"""Fix the loop: a drill's first symptoms, and checking an answer with its fixed curve, on a warm engine.

    .venv/bin/python benchmarks/bench_drills.py

Targets (issue 29): a drill's symptoms within 3 s of opening it; checking an answer and drawing the
fixed loop's curve within 2 s. Both are timed as Streamlit's AppTest reruns of the real page, on seeds
no earlier request used (so no cache answers), after every worker has run a loop once. Beside each
figure, as a ratio measured in the same run: the same runs called bare on this process's main thread
(the buggy and the correct loop; the chosen fix's loop), since this 2-core machine is shared and noisy.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

from explorers import drills, engine  # noqa: E402
from explorers.drills.experiment import DrillOptions, run_loop  # noqa: E402

PAGE = "pages/12_Fix_the_loop.py"
OPEN_TARGET_S, CHECK_TARGET_S = 3.0, 2.0
FIRST_SEED = 500  # seeds from here on are the benchmark's own: no cache holds them


def warm_workers() -> None:
    pool = engine.default_engine()
    for run in [pool.submit(run_loop, DrillOptions(seed=9_000 + i)) for i in range(2 * pool.size)]:
        run.result()
    run_loop(DrillOptions(seed=9_999))  # and this process's own imports


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def bare_s(*options: DrillOptions) -> float:
    """The same loops on this process's main thread, no engine, no page."""
    return timed(lambda: [run_loop(o) for o in options])


def main() -> None:
    warm_workers()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.switch_page(PAGE).run()
    opened, opened_bare, checked, checked_bare = [], [], [], []
    for i, (name, drill) in enumerate(sorted(drills.DRILLS.items())):
        seed = FIRST_SEED + i
        at.selectbox(key="drills.drill").set_value(drill.link_id)
        at.number_input(key="drills.seed").set_value(seed)
        opened.append(timed(at.run))
        assert not at.exception, at.exception
        opened_bare.append(bare_s(DrillOptions(name, seed + 1000), DrillOptions(name, seed + 1000).correct))
        decoy = drill.decoys[0]
        at.pills(key="drills.lines").set_value([str(n) for n in drill.bug_lines])
        at.radio(key="drills.fix").set_value(decoy).run()
        checked.append(timed(at.button(key="check").click().run))
        assert not at.exception and at.error, "a wrong fix is checked and shown"
        checked_bare.append(bare_s(DrillOptions(name, seed + 2000, decoy)))
    for what, page, bare, target in (
        ("open a drill (symptoms)", opened, opened_bare, OPEN_TARGET_S),
        ("check an answer (fixed curve)", checked, checked_bare, CHECK_TARGET_S),
    ):
        median, worst = statistics.median(page), max(page)
        ratio = median / statistics.median(bare)
        verdict = "met" if worst <= target else "MISSED"
        print(
            f"{what}: median {median:.2f} s, worst {worst:.2f} s over {len(page)} drills (target {target:.0f} s: "
            f"{verdict}); page / the same runs bare on the main thread {ratio:.2f}x"
        )
    engine.default_engine().close()


if __name__ == "__main__":
    main()
