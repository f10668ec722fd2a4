"""Modes lab: train()/eval() and the grad mode (enable_grad/no_grad/inference_mode) are independent switches.

- `your_model.mode_grid(model, batch)` runs the six combinations on your own model and leaves it as it was;
- `experiment` holds the lab's model, the grid on it and the misleading-validation run (the page runs
  them on the run engine);
- `figures` and `lesson` turn the cells into charts, tables and sentences.

    from explorers import modes
    grid = modes.mode_grid(my_model, example_batch)
    grid[("train", "no_grad")].bn_running_stats_changed   # True
"""

from explorers import lazy

__getattr__, __dir__ = lazy.exports(
    __name__,
    {
        "ModesOptions": "experiment",
        "ValidationRun": "experiment",
        "lab_grid": "experiment",
        "misleading_validation": "experiment",
        "BEHAVIOURS": "your_model",
        "GRAD_MODES": "your_model",
        "Cell": "your_model",
        "ModeGrid": "your_model",
        "mode_grid": "your_model",
    },
)

__all__ = [
    "BEHAVIOURS",
    "GRAD_MODES",
    "Cell",
    "ModeGrid",
    "ModesOptions",
    "ValidationRun",
    "lab_grid",
    "misleading_validation",
    "mode_grid",
]
