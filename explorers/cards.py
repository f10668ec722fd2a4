"""The answer card: an interview answer in four parts, its evidence taken from the run on screen.

The frame (requirement, mechanism, evidence, recovery) is the one every lab uses; a strong
answer also names a trade-off that would change the recommendation and one measurement
that could prove it wrong. Each lab builds its card from its own result, so changing a
control changes the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AnswerCard:
    question: str
    requirement: str  # who needs what; one assumption, one thing out of scope
    mechanism: str  # how PyTorch does it: a state change, a data flow, an invariant
    evidence: str  # this run's numbers
    recovery: str  # what to do when it goes wrong
    trade_off: str  # the condition that would change the recommendation
    could_prove_wrong: str  # one measurement that would refute the answer

    def parts(self) -> dict[str, str]:
        return {
            "Requirement": self.requirement,
            "Mechanism": self.mechanism,
            "Evidence (this run)": self.evidence,
            "Recovery": self.recovery,
            "Trade-off": self.trade_off,
            "What would prove it wrong": self.could_prove_wrong,
        }

    def as_markdown(self) -> str:
        return "\n".join(f"- **{name}.** {text}" for name, text in self.parts().items())
