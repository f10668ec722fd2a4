"""The engine of PyTorch Explorer: one module per lab, pure Python + torch.

Nothing here imports streamlit, so every lab runs from a notebook too::

    from explorers import autograd
    run = autograd.run(autograd.AutogradOptions(preset="mlp"), ["forward", "backward"])
    run.final.tensors   # the per-tensor table after the last step
"""

# Import the heavy libraries completely, once, in whichever thread gets here first. Streamlit runs
# each session's first page on a thread of its own, and every page imports this package first, so
# the others wait on this package's import lock. Left to race, first imports of pandas and plotly
# from several sessions at once failed here with "partially initialized module 'pandas'".
import pandas  # noqa: E402, F401
import plotly.graph_objects  # noqa: E402, F401
import plotly.io  # noqa: E402, F401
import torch  # noqa: E402, F401
