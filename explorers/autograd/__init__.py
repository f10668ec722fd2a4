"""Autograd lab: what does autograd track, and when is the graph freed?

- `experiment.run(options, steps)` builds a preset model and replays a lifecycle (forward,
  backward, zero_grad, optimizer step ...), recording the state after every step;
- `figures` and `lesson` turn the run into a table, a chart and sentences.

    from explorers import autograd
    run = autograd.run(autograd.AutogradOptions(preset="mlp", width=8), ["forward", "backward_retain"])
    run.final.saved_bytes, run.final.tensors, run.graph_source

    # your own model, on private copies (yours stays untouched):
    run = autograd.run(actions=["forward", "backward"], yours=autograd.YourModel(model, x, target))
"""

from explorers import lazy

__getattr__, __dir__ = lazy.exports(
    __name__,
    {
        "ACTIONS": "experiment",
        "PRESETS": "experiment",
        "AutogradOptions": "experiment",
        "AutogradRun": "experiment",
        "run": "experiment",
        "YourModel": "your_model",
    },
)

__all__ = ["ACTIONS", "PRESETS", "AutogradOptions", "AutogradRun", "YourModel", "run"]
