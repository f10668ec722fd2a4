"""The engine of PyTorch Explorer: one module per lab, pure Python + torch.

Nothing here imports streamlit, so every lab runs from a notebook too::

    from explorers import autograd
    run = autograd.run(autograd.AutogradOptions(preset="mlp"), ["forward", "backward"])
    run.final.tensors   # the per-tensor table after the last step
"""
