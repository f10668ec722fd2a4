"""Reading a results file strictly: size, every key, type, range and length, finite numbers, safe strings.

Whatever its origin (the lab's launcher, torchrun on a cluster, an upload), a results file
becomes a `DDPRun` only through here. Nothing in it is ever executed (JSON, no pickle);
strings that reach the page (host names, the torch version) must match a strict pattern,
and a file that does not fit gets a `ResultsFileError` naming the first thing wrong, e.g.
``ranks[1].steps[0].local_grad: expected 161 numbers``.
"""

from __future__ import annotations

import json
import math
import re

import explorers.ddp.options as lab_options
from explorers import uploads
from explorers.ddp.results import (
    FORMAT,
    HOST_PATTERN,
    LAUNCH_METHODS,
    MAX_COLLECTIVES_PER_RANK,
    MAX_ERROR_CHARS,
    MAX_FILE_BYTES,
    MAX_JSON_DEPTH,
    OUTCOMES,
    PHASES,
    RANK_OUTCOMES,
    TIME_RANGE,
    TORCH_PATTERN,
    VERSION,
    Collective,
    DDPRun,
    MicroStep,
    RankResult,
    SingleProcess,
    StepGradients,
    parameter_layout,
)


class ResultsFileError(ValueError):
    """A results file that does not match the format; the message names the first problem."""


def parse(data: bytes | str, source: str) -> DDPRun:
    """A results file's bytes, checked against the format, as a DDPRun; ResultsFileError otherwise.

    Hostile files included: the nesting is measured on the raw text, without recursion, before
    `json.loads` sees it, and every way a file can fail to parse or to fit (invalid UTF-8, a lone
    surrogate, a wrong type, recursion) ends in a ResultsFileError whose message quotes at most a
    short `repr` of what it found.
    """
    try:
        size = len(data.encode() if isinstance(data, str) else data)
    except UnicodeEncodeError:
        raise ResultsFileError("not a JSON results file: its text is not valid Unicode") from None
    if size > MAX_FILE_BYTES:
        raise ResultsFileError(f"the file is {size:,} bytes; a results file is at most {MAX_FILE_BYTES:,}")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        depth = uploads.json_depth(text)
        if depth > MAX_JSON_DEPTH:
            raise ResultsFileError(
                f"not a JSON results file: it is nested {depth:,} levels deep, over {MAX_JSON_DEPTH}"
            )
        raw = json.loads(text, parse_constant=_no_constants)
    except ResultsFileError:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as error:
        raise ResultsFileError(f"not a JSON results file: {str(error)[:200]}") from None
    return from_raw(raw, source, text)


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not a finite number")


def from_raw(raw: object, source: str, text: str | None = None) -> DDPRun:
    checker = _Checker()
    try:
        return checker.run(raw, source, text if text is not None else json.dumps(raw, allow_nan=False))
    except RecursionError:  # built in memory deeper than any file parse() accepts
        raise ResultsFileError("not a results file: nested too deeply to read") from None
    except TypeError as error:  # a value of a type no check expected there
        raise ResultsFileError(
            f"not a results file: a value of the wrong type ({uploads.escaped(str(error))})"
        ) from None


class _Checker:
    """Each method checks one part of the file and builds its dataclass; the path says where a problem is."""

    def fail(self, path: str, expected: str, value: object) -> None:
        raise ResultsFileError(f"{path}: expected {expected}, found {uploads.short_repr(value)}")

    def keys(self, value: object, path: str, names: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
        """The object's keys are `names` plus any of `optional` (added after version 1's first files)."""
        if not isinstance(value, dict):
            self.fail(path, "an object", value)
        unknown = sorted(set(value) - set(names) - set(optional))
        missing = sorted(set(names) - set(value))
        if unknown:
            raise ResultsFileError(f"{path}: unknown key(s) {uploads.short_repr(unknown[:5], 200)}")
        if missing:
            raise ResultsFileError(f"{path}: missing key(s) {missing[:5]}")
        return value

    def integer(self, value: object, path: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(path, f"an integer in [{low}, {high}]", value)
        return value

    def number(self, value: object, path: str, low: float = -1e30, high: float = 1e30) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.fail(path, "a finite number", value)
        if not low <= value <= high:
            self.fail(path, f"a number in [{low:g}, {high:g}]", value)
        return float(value)

    def optional(self, check, value: object, *args):
        return None if value is None else check(value, *args)

    def text(self, value: object, path: str, limit: int) -> str:
        if not isinstance(value, str) or len(value) > limit or not value.isprintable():
            self.fail(path, f"a printable string of at most {limit} characters", value)
        return value

    def pattern(self, value: object, path: str, pattern: str) -> str:
        if not isinstance(value, str) or not re.fullmatch(pattern, value):
            self.fail(path, f"a name matching {pattern}", value)
        return value

    def choice(self, value: object, path: str, allowed: tuple) -> str:
        if value not in allowed or not isinstance(value, str):
            self.fail(path, f"one of {list(allowed)}", value)
        return value

    def items(self, value: object, path: str, high: int, low: int = 0) -> list:
        if not isinstance(value, list) or not low <= len(value) <= high:
            self.fail(path, f"a list of {low} to {high} items", value)
        return value

    def time(self, value: object, path: str) -> float:
        return self.number(value, path, *TIME_RANGE)

    def span(self, value: object, path: str) -> tuple[float, float]:
        start, end = (self.time(v, f"{path}[{i}]") for i, v in enumerate(self.items(value, path, 2, 2)))
        if end < start:
            self.fail(path, "an end no earlier than its start", value)
        return start, end

    def run(self, raw: object, source: str, text: str) -> DDPRun:
        top = self.keys(
            raw,
            "file",
            (
                "format", "version", "outcome", "note", "options", "world_size", "backend", "launcher", "torch",
                "parameters", "launch", "ranks", "single_process",
            ),
        )  # fmt: skip
        if top["format"] != FORMAT:
            self.fail("format", repr(FORMAT), top["format"])
        self.integer(top["version"], "version", VERSION, VERSION)
        try:
            options = lab_options.from_dict(top["options"], lab_options.CLUSTER_WORLD_SIZE_RANGE)
        except ValueError as error:  # its message may quote a value from the file: cut short
            raise ResultsFileError(f"options: {uploads.escaped(str(error), 200)}") from None
        world = self.integer(top["world_size"], "world_size", *lab_options.CLUSTER_WORLD_SIZE_RANGE)
        if world != options.world_size:
            self.fail("world_size", f"the options' world_size {options.world_size}", world)
        layout = [(p["name"], p["numel"]) for p in parameter_layout()]
        parameters = self.items(top["parameters"], "parameters", len(layout), len(layout))
        for i, (entry, (name, numel)) in enumerate(zip(parameters, layout, strict=True)):
            self.keys(entry, f"parameters[{i}]", ("name", "numel"))
            if (entry["name"], entry["numel"]) != (name, numel):
                self.fail(f"parameters[{i}]", f"{name} with {numel} values (the lab's model)", entry)
        launch = self.keys(top["launch"], "launch", ("started_at", "ended_at", "port", "method"))
        ranks = self.items(top["ranks"], "ranks", world, 1)
        checked = tuple(self.rank(r, f"ranks[{i}]", options, sum(n for _, n in layout)) for i, r in enumerate(ranks))
        if [r.rank for r in checked] != list(range(len(checked))) or (len(checked) != world):
            self.fail("ranks", f"one record per rank, 0 to {world - 1}, in order", [r.rank for r in checked])
        return DDPRun(
            options=options,
            outcome=self.choice(top["outcome"], "outcome", OUTCOMES),
            note=self.optional(self.text, top["note"], "note", MAX_ERROR_CHARS),
            world_size=world,
            backend=self.choice(top["backend"], "backend", ("gloo", "nccl")),
            launcher=self.choice(top["launcher"], "launcher", lab_options.LAUNCHERS),
            torch_version=self.pattern(top["torch"], "torch", TORCH_PATTERN),
            parameters=tuple(layout),
            launch_started_at=self.optional(self.time, launch["started_at"], "launch.started_at"),
            launch_ended_at=self.optional(self.time, launch["ended_at"], "launch.ended_at"),
            port=self.optional(self.integer, launch["port"], "launch.port", 1, 65535),
            launch_method=self.optional(self.choice, launch["method"], "launch.method", LAUNCH_METHODS),
            ranks=checked,
            single_process=self.optional(self.single, top["single_process"], "single_process", options),
            source=source,
            results_json=text,
        )

    def rank(self, raw: object, path: str, options, gradient_size: int) -> RankResult:
        names = (
            "rank", "local_rank", "node", "pid", "host", "outcome", "phase", "error", "launched_at", "ready_at",
            "init_done_at", "finished_at", "param_sum_before_ddp", "param_sum_after_ddp", "final_param_sum",
            "sampler_orders", "micro_steps", "steps", "collectives",
        )  # fmt: skip
        r = self.keys(raw, path, names, optional=("recorded",))
        if not isinstance(r.get("recorded", True), bool):
            self.fail(f"{path}.recorded", "true or false", r["recorded"])
        most_micro = options.steps * options.accumulation
        orders = self.items(r["sampler_orders"], f"{path}.sampler_orders", options.epochs)
        return RankResult(
            rank=self.integer(r["rank"], f"{path}.rank", 0, options.world_size - 1),
            local_rank=self.integer(r["local_rank"], f"{path}.local_rank", 0, options.world_size - 1),
            node=self.integer(r["node"], f"{path}.node", 0, options.world_size - 1),
            pid=self.integer(r["pid"], f"{path}.pid", 0, 2**31 - 1),
            host=self.pattern(r["host"], f"{path}.host", HOST_PATTERN),
            outcome=self.choice(r["outcome"], f"{path}.outcome", RANK_OUTCOMES),
            phase=self.choice(r["phase"], f"{path}.phase", PHASES),
            error=self.optional(self.text, r["error"], f"{path}.error", MAX_ERROR_CHARS),
            launched_at=self.time(r["launched_at"], f"{path}.launched_at"),
            recorded=r.get("recorded", True),
            **{
                name: self.optional(self.time, r[name], f"{path}.{name}")
                for name in ("ready_at", "init_done_at", "finished_at")
            },
            **{
                name: self.optional(self.number, r[name], f"{path}.{name}")
                for name in ("param_sum_before_ddp", "param_sum_after_ddp", "final_param_sum")
            },
            sampler_orders=tuple(self.order(o, f"{path}.sampler_orders[{e}]", options) for e, o in enumerate(orders)),
            micro_steps=tuple(
                self.micro_step(m, f"{path}.micro_steps[{i}]", options)
                for i, m in enumerate(self.items(r["micro_steps"], f"{path}.micro_steps", most_micro))
            ),
            steps=tuple(
                self.step(s, f"{path}.steps[{i}]", options, gradient_size)
                for i, s in enumerate(self.items(r["steps"], f"{path}.steps", options.steps))
            ),
            collectives=tuple(
                self.collective(c, f"{path}.collectives[{i}]", options)
                for i, c in enumerate(self.items(r["collectives"], f"{path}.collectives", MAX_COLLECTIVES_PER_RANK))
            ),
        )

    def order(self, value: object, path: str, options) -> tuple[int, ...]:
        values = self.items(value, path, options.dataset_size)  # may be empty: a shard can be
        return tuple(self.index(v, f"{path}[{i}]", options) for i, v in enumerate(values))

    def index(self, value: object, path: str, options) -> int:
        return self.integer(value, path, 0, options.dataset_size - 1)

    def micro_step(self, raw: object, path: str, options) -> MicroStep:
        names = ("epoch", "step", "micro", "synced", "indices", "loss", "data", "forward", "backward", "optimizer")
        m = self.keys(raw, path, names, optional=("last_gradient_at",))
        if not isinstance(m["synced"], bool):
            self.fail(f"{path}.synced", "true or false", m["synced"])
        indices = self.items(m["indices"], f"{path}.indices", options.per_rank_batch, 1)
        return MicroStep(
            epoch=self.integer(m["epoch"], f"{path}.epoch", 0, options.epochs - 1),
            step=self.integer(m["step"], f"{path}.step", 0, options.steps - 1),
            micro=self.integer(m["micro"], f"{path}.micro", 0, options.accumulation - 1),
            synced=m["synced"],
            indices=tuple(self.index(v, f"{path}.indices[{i}]", options) for i, v in enumerate(indices)),
            loss=self.number(m["loss"], f"{path}.loss", 0.0),
            data=self.span(m["data"], f"{path}.data"),
            forward=self.span(m["forward"], f"{path}.forward"),
            backward=self.span(m["backward"], f"{path}.backward"),
            optimizer=self.optional(self.span, m["optimizer"], f"{path}.optimizer"),
            last_gradient_at=self.optional(self.time, m.get("last_gradient_at"), f"{path}.last_gradient_at"),
        )

    def step(self, raw: object, path: str, options, gradient_size: int) -> StepGradients:
        s = self.keys(raw, path, ("epoch", "step", "local_grad", "synced_grad", "buckets"))

        def gradient(name: str) -> tuple[float, ...]:
            values = s[name]
            if not isinstance(values, list) or len(values) != gradient_size:
                self.fail(f"{path}.{name}", f"{gradient_size} numbers", values)
            return tuple(self.number(v, f"{path}.{name}[{i}]") for i, v in enumerate(values))

        return StepGradients(
            epoch=self.integer(s["epoch"], f"{path}.epoch", 0, options.epochs - 1),
            step=self.integer(s["step"], f"{path}.step", 0, options.steps - 1),
            local=gradient("local_grad"),
            synced=gradient("synced_grad"),
            buckets=self.integer(s["buckets"], f"{path}.buckets", 0, 64),
        )

    def collective(self, raw: object, path: str, options) -> Collective:
        c = self.keys(
            raw, path, ("epoch", "step", "shadow", "bucket", "bytes", "start", "end"), optional=("micro_batch",)
        )
        if not isinstance(c["shadow"], bool):
            self.fail(f"{path}.shadow", "true or false", c["shadow"])
        return Collective(
            epoch=self.integer(c["epoch"], f"{path}.epoch", 0, options.epochs - 1),
            step=self.integer(c["step"], f"{path}.step", 0, options.steps),
            shadow=c["shadow"],
            bucket=self.integer(c["bucket"], f"{path}.bucket", 0, 64),
            bytes=self.integer(c["bytes"], f"{path}.bytes", 0, 2**30),
            start=self.time(c["start"], f"{path}.start"),
            end=self.optional(self.time, c["end"], f"{path}.end"),
            micro_batch=self.optional(
                self.integer, c.get("micro_batch"), f"{path}.micro_batch", 0, options.steps * options.accumulation
            ),
        )

    def single(self, raw: object, path: str, options) -> SingleProcess:
        s = self.keys(raw, path, ("losses", "grad_max_diffs", "param_max_diffs", "max_param_diff"))
        columns = {}
        for name in ("losses", "grad_max_diffs", "param_max_diffs"):
            values = self.items(s[name], f"{path}.{name}", options.steps)
            columns[name] = tuple(
                self.optional(self.number, v, f"{path}.{name}[{i}]", 0.0) for i, v in enumerate(values)
            )
        if len({len(v) for v in columns.values()}) != 1:
            self.fail(
                path, "as many losses as gradient and parameter differences", {k: len(v) for k, v in columns.items()}
            )
        if any(v is None for v in columns["losses"]):
            self.fail(f"{path}.losses", "numbers", columns["losses"])
        return SingleProcess(**columns, max_param_diff=self.number(s["max_param_diff"], f"{path}.max_param_diff", 0.0))
