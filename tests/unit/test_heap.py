"""ui.heap: what imports made is frozen out of the collector's way; what runs make is still collected."""

from __future__ import annotations

import gc
import sys
import types
import weakref

import pytest

from ui import heap


@pytest.fixture()
def fresh_module(monkeypatch):
    """A module 'imported' for the test, so the heap has new imports to freeze."""
    monkeypatch.setitem(sys.modules, "_heap_test_module", types.ModuleType("_heap_test_module"))
    monkeypatch.setattr(heap, "_modules_when_frozen", len(sys.modules) - 1)  # as if frozen just before the import
    yield
    gc.unfreeze()  # leave the collector as other tests expect it


def test_new_imports_are_frozen_once_and_leave_the_oldest_generation(fresh_module):
    before = len(gc.get_objects(generation=2))
    assert heap.freeze_new_imports()
    assert gc.get_freeze_count() > 0
    assert len(gc.get_objects(generation=2)) < before  # a full collection no longer walks them
    assert not heap.freeze_new_imports()  # nothing new was imported: nothing to do


def test_a_reference_cycle_made_after_the_freeze_is_still_collected(fresh_module):
    class Node:
        pass

    heap.freeze_new_imports()
    node = Node()
    node.self = node  # only a collection frees a cycle
    alive = weakref.ref(node)
    del node
    gc.collect(2)  # what Streamlit runs after every script run
    assert alive() is None
