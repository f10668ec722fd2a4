"""Questions an interviewer asks about a trace, answered by picking the evidence and then the cause.

Every answer key is computed from the trace's own reading (explorers/evidence/reading.py), never
written per file: the same rules run on a shipped trace and on an upload, and
tests/claims/test_evidence.py recomputes each key from the raw JSON. The choices come in a fixed
order (the evidence as the page shows it; causes in the order written here), so the order says
nothing about which is right.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorers.evidence.reading import Reading

# The time split's bars, in the order the figure draws them
SPLIT = {
    "compute": "GPU computing",
    "non_compute": "GPU copying, setting or communicating",
    "idle": "GPU idle",
}
BOUND_CAUSES = {
    "compute": "Its kernels: the GPU is busy computing",
    "data": "Data movement or communication on the GPU",
    "host": "The host: the GPU's queue runs dry, waiting for the CPU to launch work",
    "deps": "Waits on the GPU's side: queued work held back by events, other streams or peers",
}
HIDDEN_CAUSES = {
    "hidden": "Mostly hidden: over 60% of it overlaps computation",
    "partly": "Partly hidden: 40% to 60% of it overlaps computation",
    "exposed": "Mostly exposed: under 40% of it overlaps computation",
}
HIDDEN_ABOVE, EXPOSED_BELOW = 60.0, 40.0
NO_OP = "no CPU op recorded around it"


@dataclass(frozen=True)
class Question:
    key: str  # "bound", "sync" or "hidden"
    prompt: str
    evidence: tuple[str, ...]  # what can be picked, in the order it is shown
    causes: tuple[str, ...]
    right_evidence: str
    right_cause: str


@dataclass(frozen=True)
class Grade:
    question: str
    evidence_right: bool
    cause_right: bool

    @property
    def right(self) -> bool:
        return self.evidence_right and self.cause_right


def split_values(reading: Reading) -> dict[str, float]:
    return {"compute": reading.compute_us, "non_compute": reading.non_compute_us, "idle": reading.idle_us}


def bound_key(reading: Reading) -> tuple[str, str]:
    """The largest bar of the time split, and what it points to. An idle GPU is read by its idle split: HTA's host
    wait and kernel wait (short gaps between back-to-back kernels: launch overhead) are the host's; its "other" is
    work that was queued and held back on the GPU's side."""
    values = split_values(reading)
    largest = max(values, key=values.get)
    if largest == "compute":
        return largest, "compute"
    if largest == "non_compute":
        return largest, "data"
    host = reading.host_wait_us + reading.kernel_wait_us
    return largest, "host" if host >= reading.other_wait_us else "deps"


def blocking_label(index: int, reading: Reading) -> str:
    """A row of the blocking-call table by its number, name and time: how long it held the CPU is read in the table."""
    call = reading.blocking[index]
    return f"{index + 1}. {call.call} at {call.start_us / 1000:,.1f} ms"


MIN_SYNC_CHOICES = 3  # fewer calls to pick from give the answer away
CLEAR_LEAD = 1.25  # the longest call at least this many times the next, so the pick is a reading, not a coin toss


def longest_wait(reading: Reading) -> int | None:
    """The row of the longest blocking call inside a CPU op, where at least three such calls are shown and it leads
    the next by a clear margin; None otherwise (no question is asked)."""
    inside = sorted(
        (i for i, call in enumerate(reading.blocking) if call.op), key=lambda i: -reading.blocking[i].dur_us
    )
    if len(inside) < MIN_SYNC_CHOICES:
        return None
    first, second = (reading.blocking[i].dur_us for i in inside[:2])
    return inside[0] if first >= CLEAR_LEAD * second else None


def questions(reading: Reading) -> tuple[Question, ...]:
    found = [_bound(reading)]
    if longest_wait(reading) is not None:
        found.append(_sync(reading))
    if reading.communication_us > 0 and reading.overlap_percent is not None:
        found.append(_hidden(reading))
    return tuple(found)


def _bound(reading: Reading) -> Question:
    bar, cause = bound_key(reading)
    return Question(
        "bound",
        "What bounds this trace's GPU time? Pick the bar that shows it, then what bounds it.",
        tuple(SPLIT.values()),
        tuple(BOUND_CAUSES.values()),
        SPLIT[bar],
        BOUND_CAUSES[cause],
    )


def _sync(reading: Reading) -> Question:
    """The calls made inside a CPU op (one outside every op, such as a benchmark's own torch.cuda.synchronize(),
    names no op); the longest of them is the answer."""
    inside = [i for i, call in enumerate(reading.blocking) if call.op]
    longest = longest_wait(reading)
    # every op the table names (innermost, outermost, the launcher of the work waited for), so there is a choice
    ops = sorted({name or NO_OP for c in reading.blocking for name in (c.op, c.outer, c.launched_by)} | {NO_OP})
    return Question(
        "sync",
        "Inside the CPU's ops, where is the CPU held longest while the GPU works, and which op (the innermost) "
        "made the call? Pick the call, then the op.",
        tuple(blocking_label(i, reading) for i in inside),
        tuple(ops),
        blocking_label(longest, reading),
        reading.blocking[longest].op or NO_OP,
    )


def _hidden(reading: Reading) -> Question:
    return Question(
        "hidden",
        "Is this trace's communication hidden behind computation? Pick the figure that says, then the answer.",
        (SPLIT["non_compute"], COMMUNICATION_EVIDENCE, OVERLAP_EVIDENCE, SPLIT["idle"]),
        tuple(HIDDEN_CAUSES.values()),
        OVERLAP_EVIDENCE,
        HIDDEN_CAUSES[hidden_key(reading.overlap_percent)],
    )


OVERLAP_EVIDENCE = "HTA's overlap of communication with computation"
COMMUNICATION_EVIDENCE = "Communication kernels' total time"


def hidden_key(overlap_percent: float) -> str:
    if overlap_percent > HIDDEN_ABOVE:
        return "hidden"
    return "exposed" if overlap_percent < EXPOSED_BELOW else "partly"


def grade(question: Question, evidence: str | None, cause: str | None) -> Grade:
    return Grade(question.key, evidence == question.right_evidence, cause == question.right_cause)
