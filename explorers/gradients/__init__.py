"""Gradients lab: why is a gradient None, zero, vanishing or exploding?

- `your_model.diagnose(model, inputs, targets, loss_fn)` runs one forward and backward on private
  copies of your model and batch and says, per parameter and per layer, what backward gave it;
- `experiment` holds the lab's scenarios (a healthy baseline, a detached branch, an unused
  parameter, a frozen layer, an in-place op on a saved tensor, dead ReLUs, vanishing and exploding
  stacks, argmax in the path, forgetting zero_grad), the scale sweep, one clipping of the
  gradient and a short training run with and without clipping (the page runs them on the run engine);
- `figures` and `lesson` turn the results into charts, tables, sentences and the answer card.

What to expect: a broken graph (detach, no path, argmax) gives `.grad` None whatever the weights'
scale; unstable optimisation gives finite norms that are tiny or huge and move with depth and
initial scale; clipping scales every gradient by one factor, so the imbalance between layers stays.

    from explorers import gradients
    d = gradients.diagnose(model, inputs, targets, loss_fn)
    d.parameters["0.weight"].status   # "none" | "zero" | "finite" | "nonfinite"
    d.parameters["0.weight"].norm     # 0.0 for "none"
    d.layers                          # forward order: grad norm, weight norm, their ratio
    d.findings                        # each with .kind, .parameters, .observation
    d.verdict                         # "healthy", or one line naming what was found

    run = gradients.scenario_run(gradients.GradientsOptions.for_scenario("vanishing", depth=10))
    run.diagnosis.verdict, run.graph_source
"""

from explorers import lazy

__getattr__, __dir__ = lazy.exports(
    __name__,
    {
        "Clipping": "clipping",
        "ClipStudy": "clipping",
        "Training": "clipping",
        "clip_once": "clipping",
        "clipped_training": "clipping",
        "clipping_study": "clipping",
        "SCENARIOS": "experiment",
        "Accumulation": "experiment",
        "GradientsOptions": "experiment",
        "ScaleSweep": "experiment",
        "ScenarioRun": "experiment",
        "scale_sweep": "experiment",
        "scenario_run": "experiment",
        "KINDS": "your_model",
        "STATUSES": "your_model",
        "Diagnosis": "your_model",
        "Finding": "your_model",
        "LayerGradient": "your_model",
        "diagnose": "your_model",
    },
)

__all__ = [
    "KINDS",
    "SCENARIOS",
    "STATUSES",
    "Accumulation",
    "ClipStudy",
    "Clipping",
    "Diagnosis",
    "Finding",
    "GradientsOptions",
    "LayerGradient",
    "ScaleSweep",
    "ScenarioRun",
    "Training",
    "clip_once",
    "clipped_training",
    "clipping_study",
    "diagnose",
    "scale_sweep",
    "scenario_run",
]
