"""What the worker shares with the launcher and the lesson: the time limits, quoted as the same numbers, and the
launcher's clock variable. The worker imports this module under torchrun, so it imports nothing."""

INIT_TIMEOUT_S = 30.0  # rendezvous: every rank must have imported torch by then (4 ranks on 2 cores take ~8 s)
COLLECTIVE_TIMEOUT_S = 3.0  # the process group training runs on: a rank left waiting fails after this
RUN_TIMEOUT_S = 60.0  # the launcher's hard limit for a whole run; the run engine's own limit is longer
LAUNCHED_AT_ENV = "DDP_LAB_LAUNCHED_AT"  # the lab's clock when it started the run (absent on a cluster)
