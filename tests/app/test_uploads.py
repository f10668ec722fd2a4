"""Hostile uploads on the DDP and Reproducibility pages: a clear refusal, never a traceback or rendered markdown.

Deep JSON once crashed both pages (RecursionError), a lone surrogate in a manifest key crashed the
Reproducibility page (UnicodeEncodeError), and a file name or key holding markdown drew an image
from the uploader's address in every viewer's browser.
"""

import json

import pytest

from explorers.ddp import results
from explorers.reproducibility import manifest
from tests.app.conftest import ROOT, open_page
from tests.unit.test_uploads import HOSTILE_NAMES, assert_literal, nested

DDP = "pages/6_DDP.py"
REPRO = "pages/7_Reproducibility.py"
SAMPLE = ROOT / "assets" / "ddp" / "torchrun-2-nodes.json"
HOSTILE_NAME = "a` ![x](http://example.invalid/a.png) `b <img src=x>.json"


def upload(at, key: str, name: str, content: bytes):
    at.file_uploader(key=key).set_value((name, content, "application/json")).run()
    assert not at.exception, at.exception
    return at


def markdown_shown(at) -> list[str]:
    """Every element whose text the browser renders as markdown."""
    return [e.value for e in (*at.markdown, *at.caption, *at.success, *at.error, *at.info, *at.warning)]


@pytest.fixture(scope="module")
def ddp_page():
    at = open_page(DDP)
    assert not at.exception
    return at


@pytest.fixture(scope="module")
def repro_page():
    at = open_page(REPRO)
    assert not at.exception
    return at


def test_a_results_file_nested_at_any_depth_gets_the_clear_message(ddp_page):
    messages = {}
    for depth in [100, 700, *range(900, 1001), 5000, 100_000]:  # the old crash came at one depth near 985
        upload(ddp_page, "ddp.upload", "deep.json", nested(depth))  # no exception
        refused = any("is not a DDP lab results file" in e.value for e in ddp_page.error)
        messages[depth] = refused and any(f"nested {depth:,} levels deep" in c.value for c in ddp_page.code)
    assert [depth for depth, clear in messages.items() if not clear] == []


def test_a_results_file_name_with_markdown_and_html_is_shown_literally(ddp_page):
    upload(ddp_page, "ddp.upload", HOSTILE_NAME, SAMPLE.read_bytes())
    assert any(s.value.startswith("**Finished**") and "`a\\x60 ![x](" in s.value for s in ddp_page.success)
    named = [text for text in markdown_shown(ddp_page) if "example.invalid" in text]
    assert len(named) >= 2  # the banner and the topology graph's caption
    for text in named:
        assert_literal(text)
    for chart in ddp_page.get("plotly_chart"):  # plotly reads a caption as HTML
        assert "<img" not in chart.proto.spec and "\\u003cimg" not in chart.proto.spec
    upload(ddp_page, "ddp.upload", HOSTILE_NAME, b"[]")
    refused = [text for text in markdown_shown(ddp_page) if "example.invalid" in text]
    assert len(refused) == 1 and "is not a DDP lab results file" in refused[0]
    assert_literal(refused[0])


def test_the_uploaders_take_no_more_than_the_labs_read(ddp_page, repro_page):
    assert [u.proto.max_upload_size_mb for u in ddp_page.get("file_uploader")] == [8]
    assert [u.proto.max_upload_size_mb for u in repro_page.get("file_uploader")] == [1, 1]
    upload(ddp_page, "ddp.upload", "big.json", b" " * (results.MAX_FILE_BYTES + 1))
    assert any("is not a DDP lab results file" in e.value for e in ddp_page.error)
    assert any("over 8.0 MiB" in c.value for c in ddp_page.code)
    upload(repro_page, "reproducibility.manifest_right", "big.json", b" " * (manifest.MAX_BYTES + 1))
    assert any(e.value.startswith("**Right manifest") and "64.0 KiB" in e.value for e in repro_page.error)


def right_error(at) -> str:
    errors = [e.value for e in at.error if e.value.startswith("**Right manifest")]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("depth", [7, 100, 700, 900, 990, 5000, 30_000])
def test_a_manifest_nested_at_any_depth_gets_the_clear_message(repro_page, depth):
    upload(
        repro_page,
        "reproducibility.manifest_right",
        "deep.json",
        b'{"manifest_version": 1, "a": ' + nested(depth) + b"}",
    )
    assert f"{depth + 1:,} levels deep; a manifest is at most 6" in right_error(repro_page)


@pytest.mark.parametrize(
    "content",
    [
        b'{"manifest_version": 1, "\\ud800": 1}',
        b'{"manifest_version": 1, "seeds": {"\\udfff": true}}',
        b'{"manifest_version": 1, "seeds": "\\ud800"}',
    ],
)
def test_a_manifest_with_a_lone_surrogate_gets_the_clear_message(repro_page, content):
    upload(repro_page, "reproducibility.manifest_right", "surrogate.json", content)
    error = right_error(repro_page)
    assert "not valid Unicode" in error and "`\\ud" in error


def test_manifest_keys_and_names_with_markdown_and_html_are_shown_literally(repro_page):
    keys = {name: 1 for name in HOSTILE_NAMES}
    content = json.dumps({"manifest_version": 1, **keys}).replace("\\ud800", "").encode()
    upload(repro_page, "reproducibility.manifest_right", HOSTILE_NAME, content)
    differ = [m for m in markdown_shown(repro_page) if "field(s) differ" in m]
    assert len(differ) == 1 and "example.invalid" in differ[0]
    assert_literal(differ[0])
    upload(
        repro_page, "reproducibility.manifest_right", HOSTILE_NAME, b'{"manifest_version": "![x](http://e.invalid)"}'
    )
    assert_literal(right_error(repro_page))
