"""Sessions opening pages at once on a fresh server import the app's modules from several threads at once.

Python's import locks are per module: a package whose `__init__` imported its own modules, and a thread
importing one of them directly, deadlocked (`_DeadlockError`), and the pages caught in it showed "cannot
import name ... from partially initialized module" (five pages opened at once, four broken). This imports,
in a fresh interpreter as a server has it, every page's and every `ui` module's imports from threads of
their own, all at once, with the interpreter switching threads as often as it can.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RACE = """
import importlib, sys, threading, traceback
import streamlit  # a server has it before any page runs
sys.setswitchinterval(1e-6)
errors = []
def load(name):
    try:
        importlib.import_module(name)
    except BaseException as error:
        errors.append(f"{name}: {type(error).__name__}: {error}")
threads = [threading.Thread(target=load, args=(name,)) for name in sys.argv[1:]]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(timeout=120)
print("\\n".join(errors) or "ok")
"""


def first_imports() -> list[str]:
    """Each page's first import of the app's own modules, and every `ui` module: where a session's thread starts."""
    found = []
    for path in sorted((ROOT / "pages").glob("*.py")) + [ROOT / "app.py"]:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("explorers", "ui"):
                found.append(node.module)
                break
    found += [f"ui.{p.stem}" for p in sorted((ROOT / "ui").glob("*.py")) if p.stem != "__init__"]
    found += ["explorers.progress.history", "explorers.drills.catalogue", "explorers.tensors.catalogue"]
    return list(dict.fromkeys(found))


@pytest.mark.parametrize("attempt", range(4))
def test_every_page_and_ui_module_imports_at_once_from_threads_of_their_own(attempt):
    names = first_imports()
    if attempt % 2:
        names.reverse()
    shown = subprocess.run([sys.executable, "-c", RACE, *names], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert shown.stdout.strip() == "ok", shown.stdout[-2000:] + shown.stderr[-2000:]


def test_no_package_imports_its_own_modules_when_it_is_imported():
    """The rule that keeps the race above from deadlocking (explorers/lazy.py): a package's `__init__` imports none
    of its own modules at module level; a module inside a package imports its siblings by their full names."""
    offenders = []
    for init in sorted((ROOT / "explorers").glob("*/__init__.py")):
        package = f"explorers.{init.parent.name}"
        for node in ast.parse(init.read_text()).body:
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{init.relative_to(ROOT)}: {name}" for name in names if name.startswith(package)]
        for module in init.parent.glob("*.py"):
            for node in ast.walk(ast.parse(module.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module == package and module.name != "__init__.py":
                    offenders.append(f"{module.relative_to(ROOT)}: from {package} import ...")
    assert not offenders, offenders


def test_a_packages_own_function_keeps_its_name_when_its_namesake_module_is_imported():
    """`drills.catalogue()` beside `drills/catalogue.py`: Python sets an imported module on its package, which
    replaced the function once the package stopped importing the module before defining it."""
    script = (
        "import explorers.drills.catalogue, explorers.tensors.catalogue\n"
        "from explorers import drills, tensors\n"
        "print(len(drills.catalogue()), len(tensors.catalogue()))"
    )
    shown = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    drills, puzzles = map(int, shown.stdout.split())
    assert drills >= 14 and puzzles >= 37, shown.stderr
