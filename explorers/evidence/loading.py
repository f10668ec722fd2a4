"""A profiler trace's bytes read without trusting them: bounded, validated, and cleaned to the events a reading uses.

A trace is Kineto's Chrome-trace JSON, as `torch.profiler` writes it (`export_chrome_trace`, or
`tensorboard_trace_handler`'s `.pt.trace.json[.gz]`). An upload can be built to hurt a shared
server, so before anything reads it:

- the compressed file is at most `MAX_FILE_BYTES`; gzip is inflated in pieces and stopped at
  `MAX_JSON_BYTES` (a gzip bomb stops there, never inflated whole);
- the text nests at most `uploads.MAX_DEPTH` deep, measured without recursion before `json.loads` sees it;
- NaN, Infinity and a key twice in one object are refused, as `torch.profiler` writes none of them;
- at most `MAX_EVENTS` events; an event missing a field the reading needs, or with a negative time or
  duration, is skipped and counted, never guessed.

Nothing in the file is executed: it is parsed as JSON text and its values are only compared and added.
Streaming parsers were tried and set aside: ijson's C backend (yajl2_c) was killed for memory on JSON
nested 100,000 deep (its path prefix grows with the depth), so the depth is checked on the whole text
first, and the standard parser then reads a 35 MB trace in 0.6 s (measured on this project's 2-core VM).
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from dataclasses import dataclass, field

from explorers import uploads

MAX_FILE_BYTES = 32 * 2**20  # an upload as sent: gzip it if the JSON is larger
MAX_JSON_BYTES = 256 * 2**20  # the JSON text, once inflated
MAX_EVENTS = 2_000_000
MAX_NAME_CHARS = 2_000  # longer names (a templated kernel's can run to 10 kB) are cut here, then shown shorter
PIECE_BYTES = 2**20

# Which events a reading uses: complete spans (X) and flow arrows (s, f) with their times; metadata (M) names
# processes and threads. Counters, instants and memory events are left out.
KEPT_PHASES = frozenset({"X", "s", "f", "M"})
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})


class Refused(ValueError):
    """The file is not a trace this lab reads; the message says why, in words for the person who sent it."""


@dataclass(frozen=True)
class Trace:
    """A trace's cleaned events and what the file says about its machine."""

    events: tuple[dict, ...]
    cards: tuple[str, ...]  # deviceProperties' names, one per GPU, as the trace recorded them
    rank: int | None  # distributedInfo's rank and world size, where recorded
    world_size: int | None
    compute_major: int | None = None  # the first GPU's compute capability (7 for a V100, 8 for an A100)
    skipped: int = 0  # events dropped for a missing or negative field
    counts: dict[str, int] = field(default_factory=dict)  # events by category, as read


def read(data: bytes) -> Trace:
    """Bytes of a `.json` or `.json.gz` trace, bounded, parsed and cleaned; `Refused` with the reason otherwise."""
    if not isinstance(data, bytes | bytearray):
        raise Refused("a trace is read from the file's bytes")
    if len(data) > MAX_FILE_BYTES:
        raise Refused(f"the file is {len(data) / 2**20:.1f} MiB, over {MAX_FILE_BYTES // 2**20} MiB: gzip it first")
    text = _text(_inflated(bytes(data)))
    if not text.strip():
        raise Refused("the file is empty")
    if (depth := uploads.json_depth(text)) > uploads.MAX_DEPTH:
        raise Refused(f"its JSON nests {depth} deep; a profiler trace nests under 10 and this lab reads up to 64")
    try:
        document = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_repeated_keys)
    except Refused:
        raise
    except (ValueError, RecursionError) as error:
        raise Refused(f"it is not valid JSON ({uploads.short_repr(str(error), 120)})") from None
    del text
    return _trace(document)


def _inflated(data: bytes) -> bytes:
    if data[:2] != b"\x1f\x8b":
        if len(data) > MAX_JSON_BYTES:
            raise Refused(f"the JSON is over {MAX_JSON_BYTES // 2**20} MiB")
        _not_other_format(data)
        return data
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pieces, size = [], 0
    try:
        for start in range(0, len(data), PIECE_BYTES):
            piece = inflater.decompress(data[start : start + PIECE_BYTES], MAX_JSON_BYTES + 1 - size)
            while True:
                pieces.append(piece)
                size += len(piece)
                if size > MAX_JSON_BYTES:
                    raise Refused(f"it inflates to over {MAX_JSON_BYTES // 2**20} MiB of JSON (a gzip bomb?)")
                if not inflater.unconsumed_tail:
                    break
                piece = inflater.decompress(inflater.unconsumed_tail, MAX_JSON_BYTES + 1 - size)
        if not inflater.eof:
            raise Refused("the gzip file is cut short: it ends before its last block")
    except (zlib.error, EOFError, gzip.BadGzipFile) as error:
        raise Refused(f"it is not a readable gzip file ({error})") from None
    inflated = b"".join(pieces)
    _not_other_format(inflated)
    return inflated


def _not_other_format(data: bytes) -> None:
    if data[:1] == b"\x80":  # every pickle protocol from 2 on starts with its PROTO opcode
        raise Refused(
            "it is a Python pickle (a memory snapshot from torch.cuda.memory._dump_snapshot is one), not a trace; "
            "this lab does not unpickle files"
        )
    if data[:4] == b"PK\x03\x04":
        raise Refused("it is a zip archive, not a trace: upload the .json or .json.gz file itself")


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Refused(f"it is not a text file (byte {error.start:,} is not UTF-8), so not a JSON trace") from None


def _no_constant(name: str) -> float:
    raise Refused(f"it holds {name}, which JSON does not allow and torch.profiler does not write")


def _no_repeated_keys(pairs: list[tuple[str, object]]) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise Refused(f"an object has the key {uploads.short_repr(repeated)} twice, so its value is ambiguous")
    return result


def _trace(document: object) -> Trace:
    if isinstance(document, list) and document and all(isinstance(row, list) for row in document[:100]):
        raise Refused("it is a list of rows (a memory timeline, as export_memory_timeline writes it), not a trace")
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise Refused("it has no traceEvents list: torch.profiler's traces keep their events there")
    raw_events = document["traceEvents"]
    if len(raw_events) > MAX_EVENTS:
        raise Refused(f"it has {len(raw_events):,} events, over this lab's {MAX_EVENTS:,}: profile fewer steps")
    events, skipped, counts = [], 0, {}
    for raw in raw_events:
        if isinstance(raw, dict) and raw.get("ph") not in KEPT_PHASES:
            continue  # a counter, an instant, a memory event: not used, not malformed
        event = _event(raw)
        if event is None:
            skipped += 1
            continue
        counts[event["cat"]] = counts.get(event["cat"], 0) + 1
        events.append(event)
    properties = document.get("deviceProperties")
    cards = tuple(
        _name(p["name"]) for p in properties if isinstance(p, dict) and isinstance(p.get("name"), str)
    ) if isinstance(properties, list) else ()  # fmt: skip
    info = document.get("distributedInfo") if isinstance(document.get("distributedInfo"), dict) else {}
    first = properties[0] if isinstance(properties, list) and properties and isinstance(properties[0], dict) else {}
    rank, world, major = (
        _count(value) for value in (info.get("rank"), info.get("world_size"), first.get("computeMajor"))
    )
    return Trace(tuple(events), cards, rank, world, major, skipped, counts)


def _event(raw: object) -> dict | None:
    """The fields a reading uses, each checked; None for an event that lacks one or has one out of range."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name", ""), str):
        return None
    event = {"ph": raw["ph"], "name": _name(raw.get("name", "")), "cat": _name(raw.get("cat") or "")}
    for key in ("pid", "tid"):
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int | str):
            return None
        event[key] = value if isinstance(value, int) else _name(value)
    if raw["ph"] == "M":
        args = raw.get("args")
        event["args"] = (
            {"name": _name(args["name"])} if isinstance(args, dict) and isinstance(args.get("name"), str) else {}
        )
        return event
    ts = _time(raw.get("ts"))
    if ts is None:
        return None
    event["ts"] = ts
    if raw["ph"] == "X":
        dur = _time(raw.get("dur"))
        if dur is None:
            return None
        event["dur"] = dur
    else:
        if isinstance(raw.get("id"), bool) or not isinstance(raw.get("id"), int | str):
            return None
        event["id"] = raw["id"] if isinstance(raw["id"], int) else _name(raw["id"])
        if raw.get("bp") == "e":
            event["bp"] = "e"
    args = raw.get("args")
    if isinstance(args, dict):  # scalar arguments only (correlation, stream, External id, ...): nothing nested
        event["args"] = {
            _name(k): (_name(v) if isinstance(v, str) else v)
            for k, v in args.items()
            if isinstance(v, str) or (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v))
        }
    return event


def _time(value: object) -> float | None:
    """A timestamp or duration in microseconds: a finite number, not negative, under about 300 years."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and value.bit_length() > 63:
        return None
    return value if math.isfinite(value) and 0 <= value < 1e16 else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31 else None


def _name(text: str) -> str:
    return text[:MAX_NAME_CHARS]


def has_gpu_work(trace: Trace) -> bool:
    return any(trace.counts.get(category) for category in GPU_CATEGORIES)
