"""The engine of PyTorch Explorer: one module per lab, pure Python + torch.

Nothing here imports streamlit, so every lab runs from a notebook too::

    from explorers import autograd
    run = autograd.run(autograd.AutogradOptions(preset="mlp"), ["forward", "backward"])
    run.final.tensors   # the per-tensor table after the last step

Importing the package itself is cheap: a torchrun rank that runs `explorers.ddp.worker`
loads torch and the worker's own modules, nothing else.
"""

import sys

if "streamlit" in sys.modules:
    # In the app's server, import the heavy libraries completely, once, in whichever thread gets
    # here first. Streamlit runs each session's first page on a thread of its own, and every page
    # imports this package first (after streamlit), so the others wait on this package's import
    # lock. Left to race, first imports of pandas and plotly from several sessions at once failed
    # here with "partially initialized module 'pandas'".
    import pandas  # noqa: F401
    import plotly.graph_objects  # noqa: F401
    import plotly.io  # noqa: F401
    import torch  # noqa: F401
