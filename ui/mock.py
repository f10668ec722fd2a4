"""The mock interview: three of the labs' questions, answered aloud at three depths, challenged, then self-scored.

The set's seed is this session's; each saved self-score is kept as the learner's progress
(ui/progress.py), so it lasts across reloads and days. The weakest scores feed the study plan's Day 7.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import streamlit as st

from explorers.drills import DRILLS
from explorers.evidence.shipped import SHIPPED
from explorers.progress.history import MOCK_POINTS, MockScore
from explorers.progress.records import Record
from explorers.slowstep.catalogue import DRILLS as SLOW_DRILLS
from explorers.tensors.catalogue import PUZZLES
from ui import challenges, progress
from ui.catalogue import LABS, Lab

PAGE = "pages/11_Mock_interview.py"
QUESTION = "Three questions from the labs, answered aloud at three depths, challenged, and scored by you."
QUESTIONS_PER_SET = 3
DEPTHS = (
    "**30 s:** the headline: what must hold, and the mechanism that makes it hold.",
    "**2 min:** the four parts: requirement, mechanism, evidence from the lab, recovery.",
    "**10 min:** the whiteboard pass: draw the flow, name who owns each piece of state, add an invariant.",
)
RUBRIC = (  # MOCK_POINTS items: a score is how many were ticked
    "Requirement: what must hold, stated before the how",
    "Mechanism: how PyTorch makes it hold",
    "Evidence: a number from a run, with its settings",
    "Recovery: what to do when it breaks",
    "The metric that would prove me wrong",
)
CODING_QUESTION = (
    "The interviewer hands you a training loop that trains badly. Find the lines and the fix from its symptoms, "
    "then say why at 30 s and 2 min."
)
TENSOR_QUESTION = (
    "The interviewer opens with a small tensor transformation. Write it as one expression, then say which of your "
    "steps are views and which copy, and what its shapes are at each step."
)
TRACE_QUESTION = (
    "The interviewer shows you a real GPU trace and asks question 5's follow-ups: what bounds the step, where does "
    "the CPU wait for the GPU, is communication hidden? Answer from the evidence, then say what you would change first."
)
SLOW_STEP_QUESTION = (
    "Question 5 itself: this training step is slow. The interviewer hands you its profile and asks where the time "
    "goes and what you would change first, then asks you to show the change paid."
)
SEED_KEY = "_mock_seed"


@dataclass(frozen=True)
class Asked:
    lab: Lab
    challenge: str


def draw(seed: int) -> list[Asked]:
    """A set of questions from the built labs, each with its lab's own challenge of a different kind (a part
    fails, the cost doubles, an input breaks an assumption); the same seed, the same set."""
    rng = random.Random(seed)
    labs = rng.sample([entry for entry in LABS if entry.page], QUESTIONS_PER_SET)
    kinds = rng.sample(challenges.KINDS, len(labs))
    return [Asked(entry, challenges.challenge(entry.slug, kind)) for entry, kind in zip(labs, kinds, strict=True)]


def coding_question(seed: int) -> tuple[str, int]:
    """The set's coding question: one Fix-the-loop drill and its seed, drawn from the set's own seed."""
    rng = random.Random(f"coding-{seed}")
    return rng.choice(sorted(DRILLS)), rng.randrange(100)


def tensor_question(seed: int) -> tuple[str, int]:
    """The set's tensor transformation: one puzzle of level 2 or 3 and its seed, drawn from the set's own seed."""
    rng = random.Random(f"tensor-{seed}")
    return rng.choice(sorted(name for name, p in PUZZLES.items() if p.level >= 2)), rng.randrange(100)


def trace_question(seed: int) -> str:
    """The set's profiling evidence: one of the GPU evidence lab's shipped traces, drawn from the set's own seed."""
    return random.Random(f"trace-{seed}").choice(sorted(SHIPPED))


def slow_step_question(seed: int) -> tuple[str, int]:
    """The set's slow step: one of the Slow step lab's drills and its seed, drawn from the set's own seed."""
    rng = random.Random(f"slowstep-{seed}")
    return rng.choice(sorted(SLOW_DRILLS)), rng.randrange(100)


def current_slow_step_question() -> tuple[str, int]:
    return slow_step_question(set_seed())


def current_trace_question() -> str:
    return trace_question(set_seed())


def set_seed() -> int:
    """This session's set: drawn on first use, kept until "New set of questions"."""
    if SEED_KEY not in st.session_state:
        new_set()
    return st.session_state[SEED_KEY]


def current_tensor_question() -> tuple[str, int]:
    return tensor_question(set_seed())


def current_coding_question() -> tuple[str, int]:
    return coding_question(set_seed())


def current_set() -> list[Asked]:
    return draw(set_seed())


def new_set() -> None:
    st.session_state[SEED_KEY] = random.SystemRandom().randrange(2**32)


def record(asked: Asked, points: int) -> None:
    """The latest self-score for a lab's question (a redone answer replaces the earlier score)."""
    progress.add(Record.now("mock", asked.lab.slug, {"points": points}))


def saved_words(score: MockScore) -> str:
    return f"Saved: {score.points} of {len(RUBRIC)}. The study plan's Day 7 lists your weakest."


def scores() -> dict[str, MockScore]:
    return progress.history().mock_scores()


assert len(RUBRIC) == MOCK_POINTS
