"""How a run that returned no result is reported: one family for the run engine and the labs' own
processes (Reproducibility's fresh interpreters), so a page catches one type and shows its message.

Standard library only, and importing it changes nothing (unlike the engine, which patches
multiprocessing for its workers).
"""

from __future__ import annotations


class RunFailed(RuntimeError):
    """The experiment did not return a result; the message is meant for the user."""


class WorkerCrashed(RunFailed):
    pass


class RunTimedOut(RunFailed):
    pass
