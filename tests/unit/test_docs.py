"""Every Python block in docs/ and the READMEs runs as written, in a fresh namespace, from a scratch folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
BLOCKS = [
    pytest.param(block, id=f"{page.relative_to(ROOT)}:{n}")
    for page in PAGES
    for n, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S), 1)
]


@pytest.mark.parametrize("block", BLOCKS)
def test_a_docs_python_block_runs(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs", "exec"), {"__name__": "docs"})  # noqa: S102 - our own docs, not user input


def test_the_progress_page_example_says_what_the_page_says_it_prints(capsys):
    block = re.search(r"```python\n(.*?)```", (DOCS / "progress.md").read_text(), re.S).group(1)
    exec(compile(block, "docs/progress.md", "exec"), {})  # noqa: S102 - our own docs, not user input
    code, days, weakest = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"([A-Z2-7]{4}-){7}[A-Z2-7]{4}", code)
    assert days.endswith(": opened Autograd; 1 mock answer scored']") and weakest == "[('mock', 0.4)]"
