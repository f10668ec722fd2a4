"""Graph export through a real layout engine, and stable DOT text."""

import pytest

from explorers import graphs
from explorers.autograd import experiment as autograd

needs_engine = pytest.mark.skipif(graphs.layout_engine_name() is None, reason="no Graphviz layout engine installed")


@pytest.fixture(scope="module")
def source():
    return autograd.run(autograd.AutogradOptions(preset="scalar"), ["forward"]).graph_source


@needs_engine
def test_svg_export_lays_out_every_node_in_courier(source):
    svg = graphs.render(source, "svg").decode()
    assert svg.lstrip().startswith(("<?xml", "<svg")) and "Courier" in svg
    assert svg.count('class="node"') == source.count("[label=")


@needs_engine
def test_png_export_is_a_png(source):
    png = graphs.render(source, "png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def test_unknown_format_is_refused(source):
    with pytest.raises(ValueError):
        graphs.render(source, "pdf")


def test_the_same_run_gives_the_same_dot_text(source):
    again = autograd.run(autograd.AutogradOptions(preset="scalar"), ["forward"]).graph_source
    assert again == source and "n0" in source


@needs_engine
def test_an_exported_graph_carries_its_caption_under_it_as_every_chart_does(source):
    """The newcomer's finding: the DDP graph's PNG and SVG exports had no settings caption."""
    clustered = 'digraph ddp {\n\tsubgraph cluster_node0 {\n\t\tlabel="node 0"\n\t\ta\n\t}\n\ta -> b\n}\n'
    caption = 'DDP topology · world_size 2 · a "quoted" word'
    for dot in (source, clustered):
        svg = graphs.render(graphs.captioned(dot, caption), "svg").decode()
        assert "DDP topology · world_size 2 · a &quot;quoted&quot; word" in svg
        assert svg.count('class="node"') == graphs.render(dot, "svg").decode().count('class="node"')
    assert (
        ">node 0<" in graphs.render(graphs.captioned(clustered, caption), "svg").decode()
    )  # the cluster keeps its own
