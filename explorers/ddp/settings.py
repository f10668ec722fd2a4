"""The lab's time limits, in one place: the worker, the launcher and the lesson quote the same numbers."""

INIT_TIMEOUT_S = 30.0  # rendezvous: every rank must have imported torch by then (4 ranks on 2 cores take ~8 s)
COLLECTIVE_TIMEOUT_S = 3.0  # the process group training runs on: a rank left waiting fails after this
RUN_TIMEOUT_S = 60.0  # the launcher's hard limit for a whole run; the run engine's own limit is longer
