"""A learner's record as a file: the JSON export, and the bounded reading of one a learner uploads.

An upload is data from anywhere, so it is read as data only: bytes bounded first, then UTF-8, then
`json.loads` (nothing else: a pickle or any other binary is refused at the UTF-8 step, never opened),
then every record through `records.parse`, which bounds each string and number and accepts only
the kinds, keys and fields the app itself writes. The first problem found is the message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from explorers.progress.records import Invalid, Record, parse

FORMAT = "pytorch-explorer-progress"
FORMAT_VERSION = 1
MAX_BYTES = 4 * 1024 * 1024  # a year of daily practice is about 1 MiB
MAX_RECORDS = 20_000


class Refused(ValueError):
    """An upload that is not an export this app can read; str() says why, for the learner."""


def export(records: Iterable[Record]) -> str:
    return json.dumps(
        {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "exported_at": time.time(),
            "records": [r.as_json() for r in records],
        },
        indent=1,
    )


def read(data: bytes) -> list[Record]:
    """The records in an uploaded export, each checked; raises Refused with the first problem found."""
    if len(data) > MAX_BYTES:
        raise Refused(f"The file is {len(data) / 2**20:.1f} MiB; an export is at most {MAX_BYTES // 2**20} MiB.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(
            "The file is not text: an export is a JSON file. Binary files (a pickle, say) are not opened."
        ) from None
    try:
        raw = json.loads(text)
    except RecursionError:
        raise Refused("The file nests too deeply to be an export.") from None
    except ValueError as error:
        raise Refused(f"The file is not JSON ({getattr(error, 'msg', 'unreadable')}).") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise Refused(f"The file is JSON, but not a PyTorch Explorer progress export (its format is not {FORMAT!r}).")
    if raw.get("version") != FORMAT_VERSION:
        raise Refused(f"The export's version is not {FORMAT_VERSION}, the one this app reads.")
    listed = raw.get("records")
    if not isinstance(listed, list):
        raise Refused("The export has no list of records.")
    if len(listed) > MAX_RECORDS:
        raise Refused(f"The export holds {len(listed)} records; at most {MAX_RECORDS} are read.")
    checked = []
    for number, item in enumerate(listed, 1):
        try:
            checked.append(parse(item))
        except Invalid as error:
            raise Refused(f"Record {number} is not one this app writes: {error}.") from None
    return checked


def identity(record: Record) -> tuple:
    return record.kind, record.key, record.at, json.dumps(dict(record.data), sort_keys=True)


def new_records(existing: Iterable[Record], imported: Iterable[Record]) -> list[Record]:
    """The imported records not already kept (an export imported twice adds nothing the second time)."""
    seen = {identity(r) for r in existing}
    fresh = []
    for record in imported:
        if identity(record) not in seen:
            seen.add(identity(record))
            fresh.append(record)
    return fresh
