"""The notes export: each figure once, in the state the page last drew it."""

from __future__ import annotations

import html
import json
import re

from streamlit.testing.v1 import AppTest

from ui import notes


def _draw_like_the_memory_lab() -> None:
    """The batch-size chart redrawn as each result arrives (a key per draft), then one other chart."""
    import plotly.graph_objects as go

    from ui import figures, notes

    notes.begin()
    for count in range(2, 9):
        bars = go.Figure(go.Bar(x=[str(2**i) for i in range(count)], y=[1.0] * count))
        figures.plotly(bars, f"Memory by batch size · {count} batch sizes", "memory-sweep", key=f"memory-sweep-{count}")
    figures.plotly(go.Figure(go.Scatter(x=[0, 1], y=[1, 2])), "Live memory", "memory-timeline")
    figures.plotly(go.Figure(go.Bar(x=["a"], y=[1.0])), "Memory by batch size · redrawn", "memory-sweep", key="again")


def test_a_chart_drawn_several_times_under_one_name_is_exported_once_in_its_last_state():
    """Issue 21: Memory's notes held 7 drafts of the batch-size chart (2 to 8 bars)."""
    at = AppTest.from_function(_draw_like_the_memory_lab).run()
    assert not at.exception
    collected = at.session_state[notes.STATE_KEY]
    document = notes.document("Memory lab", "seed 0 · cpu", {}, collected)
    drawn = [json.loads(html.unescape(m)) for m in re.findall(r"data-figure='([^']*)'", document)]
    assert len(drawn) == 2  # the sweep once, the timeline once
    sweep = next(f for f in drawn if f["data"][0]["type"] == "bar")
    assert sweep["data"][0]["x"] == ["a"]  # the last drawing, not a draft
    captions = [a["text"] for f in drawn for a in f["layout"]["annotations"]]
    assert any("redrawn" in c for c in captions) and not any("batch sizes" in c for c in captions)
    assert [name for name in collected.charts] == ["memory-sweep", "memory-timeline"]  # in the order first drawn


def test_a_fenced_loop_is_exported_as_one_code_block_with_its_indentation_and_no_backticks():
    """The newcomer's finding: the notes export turned the drill's loop into a paragraph per line, its indentation
    and its fences lost."""
    from explorers import drills
    from explorers.drills import figures as charts

    source = drills.DRILLS[drills.DEFAULT_DRILL].source
    numbered = charts.numbered_source(source)
    out = notes.markdown_to_html(f"Before\n```\n{numbered}\n```\n- after")
    assert out.count("<pre><code>") == 1 and "```" not in out and "<p>" in out and "<li>after</li>" in out
    code = out.split("<pre><code>")[1].split("</code></pre>")[0]
    assert code == html.escape(numbered)  # every line, its indentation kept, nothing wrapped in <p>
    assert "        for x, y in loader:" in html.unescape(code)
