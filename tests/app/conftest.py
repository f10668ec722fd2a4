"""Pages run headlessly with Streamlit's AppTest, entered the way a user enters them: through app.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "pages").glob("*.py"))
TIMEOUT_S = 60


def open_page(page: str | None, query: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    if page:
        at.switch_page(page)
    for name, value in (query or {}).items():
        at.query_params[name] = value
    return at.run()


@pytest.fixture()
def open_lab():
    return open_page
