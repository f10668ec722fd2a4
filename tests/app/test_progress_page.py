"""A learner's progress in the app: it lasts across sessions under their id only, it can move to another device,
be exported, imported and deleted, and the labs keep working when it cannot be saved."""

from __future__ import annotations

import json
import pickle
import re
import time

from explorers.progress import learner, transfer
from tests.app.conftest import open_page
from ui import plan, progress, your_record

AUTOGRAD = "pages/1_Autograd.py"
MARKUP = "<img src=x onerror=alert(1)> [link](http://x) ![i](http://x) :red[red] $x^2$ **bold** <script>1</script>"


def as_learner(page: str, learner_id: str, query: dict | None = None):
    from streamlit.testing.v1 import AppTest

    from tests.app.conftest import ROOT, TIMEOUT_S

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    at.switch_page(page)
    at.session_state[progress.LEARNER_KEY] = learner_id  # what the cookie holds in a browser
    return at.run()


def answers_shown(at) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("- ✓") or m.value.startswith("- ✗")]


def open_record(at):
    return at.expander  # the panel's widgets are drawn inside it whether it is open or not


def test_a_prediction_lasts_into_a_new_session_of_the_same_learner_and_no_other():
    me, other = learner.new_id(), learner.new_id()
    at = as_learner(AUTOGRAD, me)
    at.radio(key="autograd.predict").set_value("Zero").run()
    later = as_learner(plan.PAGE, me)  # a reload, a restarted server or another replica: a new session
    assert {m.label: m.value for m in later.metric}["Predictions answered"] == "0 of 1 right"
    assert len(answers_shown(later)) == 1
    stranger = as_learner(plan.PAGE, other)
    assert {m.label: m.value for m in stranger.metric}["Predictions answered"] == "none yet"
    assert not answers_shown(stranger)


def test_the_sidebar_says_what_is_kept_and_where():
    at = open_page(plan.PAGE)
    lines = [c.value for c in at.sidebar.caption]
    assert "Your scores and answers are saved in SQLite under an anonymous id this browser keeps." in lines
    assert any(your_record.KEPT in c.value and "progress.sqlite3" in c.value for c in at.caption)


def test_when_the_store_cannot_be_reached_the_labs_work_and_say_progress_is_not_saved(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "sqlite:////dev/null/no-folder/progress.sqlite3")
    at = open_page(AUTOGRAD)
    assert not at.exception and at.radio(key="autograd.predict")
    warnings = [w.value for w in at.warning if "Progress is not being saved" in w.value]
    assert len(warnings) == 1 and "The labs work as before" in warnings[0]
    assert any("not being saved" in c.value for c in at.sidebar.caption)
    at.radio(key="autograd.predict").set_value("Zero").run()  # kept in the tab while the store is down
    assert not at.exception and any("0 of 1" in c.value for c in at.caption)
    at.switch_page(plan.PAGE).run()
    assert not at.exception and {m.label: m.value for m in at.metric}["Predictions answered"] == "0 of 1 right"


def export(listed) -> bytes:
    return json.dumps({"format": transfer.FORMAT, "version": 1, "records": listed}).encode()


def upload(at, content: bytes, name: str = "progress.json"):
    at.file_uploader(key="record-import").set_value((name, content, "application/json")).run()
    return at


def test_an_import_with_markup_in_its_one_text_field_shows_it_as_plain_text():
    question = {"question": MARKUP, "right": False}
    at = upload(
        open_page(plan.PAGE),
        export([{"kind": "prediction", "key": "autograd.predict", "at": time.time(), "data": question}]),
    )
    assert not at.exception and [s.value for s in at.success] == ["Imported 1 record."]
    shown = " ".join(answers_shown(at)) + " ".join(p.proto.label for p in at.get("page_link"))
    assert MARKUP not in shown  # every punctuation mark is escaped, so markdown shows each as typed
    assert re.sub(r"\\(.)", r"\1", shown).count(MARKUP) == 2  # the answers list and Day 7's link
    assert not re.search(r"(?<!\\)[<\[\]$*`]", shown.replace(" ✗ ", " "))  # no unescaped markup character


def test_hostile_imports_are_refused_with_a_message_and_change_nothing():
    at = open_page(plan.PAGE)
    for content, said in (
        (pickle.dumps({"format": transfer.FORMAT, "records": []}), "not text"),
        (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
        (b'{"records": []}', "not a PyTorch Explorer progress export"),
        (export([{"kind": "visit", "key": "<b>x</b>", "at": time.time(), "data": {}}]), "Record 1 is not one"),
    ):
        upload(at, content, f"{said}.json")
        assert not at.exception
        assert [e.value for e in at.error if e.value.startswith("Not imported.")], said
        assert said in at.error[0].value.replace("\\", "")
    assert {m.label: m.value for m in at.metric}["Predictions answered"] == "none yet"


def test_a_resume_code_moves_this_browsers_record_to_the_learner_it_names():
    me, phone = learner.new_id(), learner.new_id()
    as_learner(AUTOGRAD, me).radio(key="autograd.predict").set_value("Zero").run()
    at = as_learner("pages/2_Modes.py", phone)  # the other device opened a lab
    at.switch_page(plan.PAGE).run()
    at.text_input(key="record-code").input("not a code").run()
    at.button(key="record-continue").click().run()
    assert at.error[0].value.startswith("That is not a resume code")
    at.text_input(key="record-code").input(learner.resume_code(me).lower()).run()
    at.button(key="record-continue").click().run()
    assert not at.exception and at.session_state[progress.LEARNER_KEY] == me
    assert at.success[0].value == "Continuing with that code's record: 3 records now, 1 of them from this browser."
    at.run()
    assert {m.label: m.value for m in at.metric}["Labs opened"] == "2"  # Autograd here, Modes there
    assert {m.label: m.value for m in as_learner(plan.PAGE, me).metric}["Predictions answered"] == "0 of 1 right"
    assert {m.label: m.value for m in as_learner(plan.PAGE, phone).metric}["Labs opened"] == "0"


def test_deleting_the_record_removes_it_from_the_store_and_starts_a_new_id():
    me = learner.new_id()
    at = as_learner(AUTOGRAD, me)
    at.radio(key="autograd.predict").set_value("Zero").run()
    at.switch_page(plan.PAGE).run()
    assert at.button(key="record-delete").disabled  # a checkbox first
    at.checkbox(key="record-delete-sure").check().run()
    at.button(key="record-delete").click().run()
    assert not at.exception and at.success[0].value.startswith("Deleted 2 records.")
    assert at.session_state[progress.LEARNER_KEY] != me
    assert progress.store().records(learner.digest(me)) == []


def test_the_resume_code_is_hidden_while_presenting():
    shown = open_page(plan.PAGE)
    code = learner.resume_code(shown.session_state[progress.LEARNER_KEY])
    assert any(c.value == code for c in shown.code)
    presenting = open_page(plan.PAGE, {"present": "1"})
    assert not presenting.code and any("Hidden while presenting" in c.value for c in presenting.caption)


def test_a_tab_left_open_after_its_record_was_deleted_saves_nothing_and_says_so():
    me = learner.new_id()
    stale = as_learner(AUTOGRAD, me)
    deleting = as_learner(plan.PAGE, me)
    deleting.checkbox(key="record-delete-sure").check().run()
    deleting.button(key="record-delete").click().run()
    stale.radio(key="autograd.predict").set_value("Zero").run()
    assert not stale.exception and any("Your record was deleted" in w.value for w in stale.warning)
    assert progress.store().records(learner.digest(me)) == []
    again = as_learner(plan.PAGE, me)  # a device that still has the deleted id in its cookie
    assert again.session_state[progress.LEARNER_KEY] != me and not any("deleted" in w.value for w in again.warning)


def test_the_apps_own_questions_keep_their_code_marks_and_stray_markup_is_escaped():
    assert progress.plain("What is `block1.fc.weight.grad`?") == "What is `block1.fc.weight.grad`\\?"
    assert progress.plain("a `b` [c](d) `e") == "a `b` \\[c\\]\\(d\\) \\`e"
