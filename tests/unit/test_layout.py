"""The code base's promises about itself: the documented lab layout, thin pages, and explorers free of streamlit."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

from explorers.statements import Statement

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED = {"progress"}  # packages every lab uses (the learner's progress), not labs
LABS = sorted(p.name for p in (ROOT / "explorers").iterdir() if (p / "__init__.py").exists() and p.name not in SHARED)
EVERY_LAB_HAS = ("__init__.py", "experiment.py", "figures.py", "lesson.py", "card.py")
LABEL_MAX_CHARS = 60  # longer than a label is a sentence, and sentences live in lesson.py or card.py


def test_the_architecture_docs_layout_table_names_every_part_every_lab_has():
    readme = (ROOT / "docs" / "architecture.md").read_text()
    for part in EVERY_LAB_HAS[1:]:
        assert f"`explorers/<lab>/{part}`" in readme, part
    assert "`tests/claims/test_<lab>.py`" in readme and "`tests/zoo.py`" in readme


@pytest.mark.parametrize("lab", LABS)
def test_every_lab_has_the_promised_parts_and_a_statements_table(lab):
    package = ROOT / "explorers" / lab
    missing = [part for part in EVERY_LAB_HAS if not (package / part).exists()]
    assert not missing, f"explorers/{lab}/ lacks {missing}"
    statements = importlib.import_module(f"explorers.{lab}.lesson").STATEMENTS
    assert isinstance(statements, dict) and all(isinstance(s, Statement) for s in statements.values())
    assert (ROOT / "tests" / "claims" / f"test_{lab}.py").exists()


def _imports(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted((ROOT / "explorers").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_explorers_never_import_streamlit(path):
    assert "streamlit" not in _imports(path)


def _sentences(path: pathlib.Path) -> list[str]:
    """String literals longer than a label, outside docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            docstrings.add(id(body[0].value))
    return [
        f"{path.name}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and len(node.value) > LABEL_MAX_CHARS
    ]


@pytest.mark.parametrize("path", sorted((ROOT / "pages").glob("*.py")), ids=lambda p: p.name)
def test_pages_hold_no_sentences(path):
    assert not _sentences(path), "move these into the lab's lesson.py or card.py"


def test_a_torchrun_rank_imports_torch_and_the_workers_own_modules_and_nothing_heavy():
    import subprocess
    import sys

    script = "import sys, explorers.ddp.worker; print(' '.join(sorted(sys.modules)))"
    shown = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    loaded = set(shown.stdout.split())
    heavy = {"pandas", "plotly", "streamlit", "explorers.engine", "explorers.ddp.launcher", "explorers.ddp.figures"}
    assert not heavy & loaded, heavy & loaded
    # -X importtime prints an import when it finishes, nested ones first: the packages above the worker
    # finish before torch does, so torch is first imported by the worker, after its launch clock started.
    finished = [line.rsplit("|", 1)[-1].strip() for line in shown.stderr.splitlines() if "|" in line]
    assert finished.index("explorers") < finished.index("torch")
    assert finished.index("explorers.ddp") < finished.index("torch")


def explorer_imports() -> dict[str, set[str]]:
    """Every explorers module -> the explorers modules it imports, at module level or inside a function."""
    modules = {}
    for path in (ROOT / "explorers").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("explorers"):
                found |= {resolve(f"{node.module}.{a.name}") or resolve(node.module) for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {resolve(a.name) for a in node.names if a.name.startswith("explorers")}
        graph[name] = found - {None, name}
    return graph


def test_no_two_explorer_modules_import_each_other_and_no_lab_reaches_into_one_built_on_it():
    """Third audit: reproducibility's job and manifest imported each other, and the Memory lab reached into the
    Real-scale lab that is built on it. Modules form no cycle; lab packages form no cycle either."""
    graph = explorer_imports()

    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for target in graph[node]:
                if target == start:
                    return [*path, start]
                if target not in seen:
                    seen.add(target)
                    stack.append((target, [*path, target]))
        return None

    cycles = [c for c in map(cycle_from, graph) if c]
    assert not cycles, cycles
    labs = {f"explorers.{p.parent.name}" for p in (ROOT / "explorers").glob("*/lesson.py")}
    package = lambda name: ".".join(name.split(".")[:2])  # noqa: E731
    between = {(package(a), package(b)) for a, targets in graph.items() for b in targets}
    between = {(a, b) for a, b in between if a != b and a in labs and b in labs}
    assert not {(a, b) for a, b in between if (b, a) in between}
    assert not [b for a, b in between if a == "explorers.memory"]  # the labs built on it reach down, never up


def test_presenting_a_log_axis_in_powers_draws_its_exponents_at_sixteen_px_or_more():
    """The newcomer's finding: the Gradients lab's exponents were 15.4 px while presenting (70% of 22 px)."""
    import plotly.graph_objects as go

    from ui import figures

    def figure() -> go.Figure:
        drawn = go.Figure(go.Scatter(x=[1, 2, 3], y=[1e-6, 1e-3, 1.0]))
        return drawn.update_yaxes(type="log", exponentformat="power")

    laid_out = figures.lay_out(figure(), "A caption", True)
    assert laid_out.layout.yaxis.tickfont.size * figures.SUPERSCRIPT_SHARE >= 16
    plain = figures.lay_out(figure(), "A caption", False)
    assert plain.layout.yaxis.tickfont.size is None  # not presenting: as the builder drew it


def test_a_loops_code_block_keeps_every_line_and_its_indentation_and_numbers_each():
    """The newcomer's finding: on a phone, wrapped code lines started at column 0."""
    import html
    import re

    from explorers import drills
    from ui import code

    source = drills.DRILLS["forgot_zero_grad"].source
    numbered = code.numbered_html(source)
    lines = numbered.split("\n")
    assert len(lines) == len(source.rstrip().split("\n"))
    for number, (shown, written) in enumerate(zip(lines, source.rstrip().split("\n"), strict=True), 1):
        assert re.match(rf"<span class='ln'>\s*{number}</span>", shown)
        assert html.unescape(re.sub(r"<[^>]+>", "", shown.split("</span>", 1)[1])) == written  # indentation kept
    css = (pathlib.Path(code.__file__).parents[1] / "assets" / "style.css").read_text()
    assert ".code-block pre { margin: 0; padding: 0.9rem 1rem; white-space: pre !important;" in css
