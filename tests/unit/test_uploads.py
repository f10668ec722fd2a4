"""Hostile uploads: JSON nested deep enough to exhaust recursion, lone surrogates, markdown in names and keys.

The DDP results file and the run manifest are the app's two uploads; each reader must refuse a
hostile file with a ValueError that says why (never a RecursionError or UnicodeEncodeError), and
what the page shows of a name or key must be literal text, not markdown.
"""

from __future__ import annotations

import json
import random
import re
import time
import tomllib
from pathlib import Path

import pytest

from explorers import uploads
from explorers.ddp import results, schema
from explorers.reproducibility import lesson as repro_lesson
from explorers.reproducibility import manifest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "assets" / "ddp" / "torchrun-2-nodes.json"
HOSTILE_NAMES = [
    "![x](http://example.invalid/a.png)",
    "<img src=x onerror=alert(1)>",
    "a` ![x](http://example.invalid/a.png) `b",
    "``[link](http://example.invalid)``",
    "www.example.invalid",
    "line\nbreak\ud800",
]


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def a_manifest(**extra) -> dict:
    return {"manifest_version": 1, "seeds": {"seed": 0}, **extra}


def outside_code_spans(markdown: str) -> str:
    """The markdown with its code spans (CommonMark: a run of n backticks to the next run of exactly n) removed."""
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", markdown, flags=re.DOTALL)


def assert_literal(markdown: str) -> None:
    """No image, link, autolink or HTML can come of the markdown: uploaded text sits in code spans only."""
    outside = outside_code_spans(markdown)
    for active in ("![", "](", "<", "example.invalid", "\n"):
        assert active not in outside, (active, markdown)
    markdown.encode("utf-8")  # sendable: no lone surrogate left
    try:
        from markdown_it import MarkdownIt  # with the dev requirements (rich); a stand-in for the browser's renderer
    except ImportError:
        return
    html = MarkdownIt("commonmark").render(markdown)
    assert "<img" not in html and "<a " not in html, html


# --- Measuring depth without recursion --------------------------------------------------------------------------


def recursive_depth(value) -> int:
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if children is None else 1 + max((recursive_depth(c) for c in children), default=0)


def random_json(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.3:
        return rng.choice([1, -2.5e-3, None, True, "plain", 'q"[{', "\\]}", "", "😀 [", "\\"])
    if rng.random() < 0.5:
        return [random_json(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", "[", "}{", '"', "\\"]) + str(i): random_json(rng, depth - 1) for i in range(3)}


def test_json_depth_matches_the_parsed_depth_and_ignores_brackets_in_strings():
    rng = random.Random(0)
    for _ in range(300):
        value = random_json(rng, 8)
        for text in (json.dumps(value), json.dumps(value, indent=1, ensure_ascii=False)):
            assert uploads.json_depth(text) == recursive_depth(value), text
    assert uploads.json_depth('"[[[["') == 0 and uploads.json_depth('{"a": [1]}') == 2
    assert uploads.json_depth(nested(100_000).decode()) == 100_000  # counted, not recursed


@pytest.mark.parametrize(
    "text",
    [
        '"' + '\\"' * 2_000_000,  # one string never closed: every later quote is escaped
        '"abc\\',  # ends inside an escape
        "[" * 10 + '"' + "[" * 1000,  # brackets after an unterminated string are inside it, for json.loads too
    ],
)
def test_json_depth_is_linear_and_at_least_what_json_loads_reaches_on_text_that_is_not_json(text):
    start = time.perf_counter()
    depth = uploads.json_depth(text)
    assert time.perf_counter() - start < 5  # a quadratic scan would take minutes on the first
    assert depth >= text.split('"')[0].count("[")


def test_short_repr_is_bounded_on_any_depth_or_size():
    deep: list = []
    for _ in range(50_000):  # built without recursion; repr() of it raises RecursionError
        deep = [deep]
    with pytest.raises(RecursionError):
        repr(deep)
    for value in (deep, "x" * 10**6, {"\ud800" * 100: list(range(10**5))}, 10**4000):
        shown = uploads.short_repr(value)
        assert len(shown) <= uploads.SHOWN_CHARS
        shown.encode("utf-8")


# --- The run manifest -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["value", "bare"])
def test_a_manifest_nested_at_any_depth_is_refused_with_a_message(where):
    for depth in [*range(7, 1101), 5000, 30_000]:
        data = nested(depth) if where == "bare" else b'{"manifest_version": 1, "a": ' + nested(depth - 1) + b"}"
        with pytest.raises(ValueError, match="levels deep") as refused:
            manifest.parse(data)
        assert type(refused.value) is ValueError


@pytest.mark.parametrize(
    "data",
    [
        json.dumps(a_manifest(**{"\ud800": 1})).encode(),  # JSON spells the lone surrogate as \ud800
        json.dumps(a_manifest(seeds={"seed": "\udfff"})).encode(),
        json.dumps(a_manifest(), ensure_ascii=False)[:-1] + ', "\ud800": 1}',  # a str that cannot be encoded
    ],
)
def test_a_manifest_with_a_lone_surrogate_is_refused_and_the_message_can_be_sent(data):
    with pytest.raises(ValueError, match="not valid Unicode") as refused:
        manifest.parse(data)
    str(refused.value).encode("utf-8")


def test_a_manifest_quotes_its_content_only_as_a_short_code_span():
    hostile = "![x](http://example.invalid/a.png)"
    with pytest.raises(ValueError) as refused:
        manifest.parse(json.dumps({"manifest_version": hostile}).encode())
    assert_literal(str(refused.value))


def test_keys_with_markdown_or_html_are_shown_as_code_spans():
    left = a_manifest()
    right = a_manifest(**{name: 1 for name in HOSTILE_NAMES[:-1]})
    fields = [d.field for d in manifest.differences(left, manifest.parse(json.dumps(right).encode()))]
    assert fields == HOSTILE_NAMES[:-1]
    line = repro_lesson.fields_differ(fields)
    assert line.startswith("**5 field(s) differ:** `![x](http://example.invalid/a.png)`, `\\x3cimg")
    assert_literal(line)


# --- The DDP results file ---------------------------------------------------------------------------------------


def test_a_results_file_nested_at_any_depth_is_refused_with_a_message():
    sample = json.loads(SAMPLE.read_text())
    unclear = []
    for depth in [*range(uploads.MAX_DEPTH + 1, 1101), 5000, 100_000]:
        for data in (nested(depth), json.dumps({**sample, "note": "NOTE"}).replace('"NOTE"', nested(depth).decode())):
            with pytest.raises(schema.ResultsFileError) as refused:  # not a RecursionError, at any depth
                schema.parse(data, "deep.json")
            if "levels deep" not in str(refused.value):
                unclear.append(depth)
    assert unclear == []


def test_a_deep_value_in_memory_is_refused_not_a_recursion_error():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(schema.ResultsFileError, match="nested too deeply|expected an object"):
        schema.from_raw(deep, "deep")


def hostile_sample(change) -> str:
    data = json.loads(SAMPLE.read_text())
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d.update({"\ud800": 1}), "unknown key"),
        (lambda d: d["ranks"][0].update(host="\ud800"), r"ranks\[0\]\.host"),
        (lambda d: d.update(note="a\udfffb"), "note"),
        (lambda d: d["options"].update(sharding="\ud800"), "sharding"),
        (lambda d: d.update({"x" * 10**6: 1}), "unknown key"),  # a message never floods the page
        (lambda d: d["options"].update(shuffle="y" * 10**6), "shuffle"),
        (lambda d: d["ranks"][0].update(steps={"a": 1}), "steps"),  # wrong types
        (lambda d: d["options"].update(bucket_cap_mb=[1]), "bucket_cap_mb"),
    ],
)
def test_a_results_file_with_lone_surrogates_or_huge_values_is_refused_with_a_short_message(change, where):
    with pytest.raises(schema.ResultsFileError, match=where) as refused:
        schema.parse(hostile_sample(change).encode(), "bad.json")
    message = str(refused.value)
    assert len(message) < 400, message[:500]
    message.encode("utf-8")


# --- Names shown on the page, and the upload limits -------------------------------------------------------------


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_name_becomes_a_code_span_that_shows_it_literally(name):
    shown = uploads.code(name)
    assert shown.startswith("`") and shown.endswith("`") and "`" not in shown[1:-1]
    assert "<" not in shown and ">" not in shown  # plotly reads a chart caption as HTML
    assert_literal(shown)
    assert len(uploads.code(name * 100)) <= uploads.SHOWN_CHARS + 3  # 2 backticks and …


def test_the_server_takes_no_larger_upload_than_the_labs_need():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    largest = max(results.MAX_FILE_BYTES, manifest.MAX_BYTES)
    assert config["server"]["maxUploadSize"] == uploads.upload_megabytes(largest) == 8
    assert results.MAX_UPLOAD_MB * uploads.MEBIBYTE >= results.MAX_FILE_BYTES and results.MAX_UPLOAD_MB == 8
    assert manifest.MAX_UPLOAD_MB == 1
