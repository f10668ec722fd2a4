"""A learner's progress, kept in a real database: drill attempts, timed sets, predictions, mock scores, labs opened.

- `learner`: the anonymous learner id a browser keeps, its resume code, and the digest the store files it under;
- `records`: what is kept (each `Record` a kind, a key, a UTC timestamp and a few bounded fields), and the check
  every record passes before it is written or imported;
- `store`: SQLite (the default: one file, WAL) or PostgreSQL (`DATABASE_URL`) through one SQLAlchemy Core path,
  with a versioned schema migrated on open;
- `transfer`: a learner's record as a JSON file, and the bounded reading of one a learner uploads;
- `history`: what the records add up to: drill scores, the running timed set, the days, the weakest answers.

From a notebook::

    from explorers import progress
    store = progress.store.open_store("sqlite:///progress.db")
    me = progress.learner.new_id()
    store.add(progress.learner.digest(me), progress.records.Record.now("visit", "autograd", {}))
    progress.history.History(store.records(progress.learner.digest(me))).days()
"""

from explorers import lazy

__getattr__, __dir__ = lazy.exports(
    __name__, {name: name for name in ("history", "learner", "records", "store", "transfer")}
)

__all__ = ["history", "learner", "records", "store", "transfer"]
