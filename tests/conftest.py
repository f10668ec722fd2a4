"""Markers and isolation for the whole suite.

- `e2e`: drives a running server in a real Chromium (tests/e2e); `slow`: a test file whose runs
  start processes or train for seconds. `make quick` runs everything else.
- Progress is kept in a throwaway data folder (EXPLORER_DATA), whatever DATABASE_URL the shell has.
- Each test file starts with an empty run-engine cache, so no file's result or time depends on
  which files ran before it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest

# Progress goes to a throwaway SQLite file, never the tester's own (servers the tests start inherit this).
if "EXPLORER_DATA" not in os.environ:
    os.environ["EXPLORER_DATA"] = tempfile.mkdtemp(prefix="explorer-progress-")
    atexit.register(shutil.rmtree, os.environ["EXPLORER_DATA"], ignore_errors=True)
os.environ.pop("DATABASE_URL", None)

# Files whose tests start fresh interpreters, torch.distributed jobs or profiled training runs.
SLOW_FILES = {
    "test_ddp.py",
    "test_ddp_page.py",
    "test_reproducibility.py",
    "test_reproducibility_page.py",
    "test_profiler.py",
    "test_profiler_page.py",
    "test_your_model.py",
    "test_docs.py",  # every docs example: DDP's processes and Reproducibility's interpreters among them
}


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.parent.name == "e2e":
            item.add_marker(pytest.mark.e2e)
        elif item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope="module")
def _empty_engine_cache():
    # Only where a test already started the engine: importing it here would patch multiprocessing in every
    # test process (measured: the browser test of a left page then saw its DataLoader workers outlive it).
    engine = sys.modules.get("explorers.engine")
    if engine is not None and engine._default is not None:
        engine._default.forget_results()
    yield


@pytest.fixture(scope="session")
def postgres_url():
    """A throwaway PostgreSQL cluster for the session (skipped where no PostgreSQL is installed)."""
    from tests import postgres

    if postgres.binaries() is None:
        pytest.skip("no PostgreSQL here (make test installs it as root on Debian)")
    with postgres.cluster() as url:
        yield url
