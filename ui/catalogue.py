"""The lab map: every lab, the interview question it answers, and its page once built."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lab:
    slug: str
    title: str
    question: str
    icon: str  # a Material icon: Streamlit ships the font, so it draws where emoji fonts are missing
    page: str | None  # path of the page file, None while the lab is still to come
    figure: str = "chart"  # what a browser test waits for first: "graph" (Graphviz), "chart" (plotly) or "task"
    extends: int | None = None  # the interview question (1 to 8) this lab continues, if it is not one itself

    @property
    def follows(self) -> str:
        """For a lab that continues one of the guide's eight questions: which one, in words ("" for the others)."""
        if self.extends is None:
            return ""
        return f"A follow-up to the guide's interview question {self.extends}: {GUIDE_QUESTIONS[self.extends]}"

    @property
    def url_path(self) -> str:
        """Streamlit's URL for a pages/ file: the file name without its order prefix."""
        return self.page.rsplit("/", 1)[-1].removesuffix(".py").split("_", 1)[-1] if self.page else ""


# The eight questions of the guide the labs are built from (TOPICS.md), as it titles them.
GUIDE_QUESTIONS = {
    1: "what autograd tracks.",
    2: "why gradients are zero, None or huge.",
    3: "train() versus eval().",
    4: "DDP versus just using several GPUs.",
    5: "debugging a slow training step.",
    6: "out-of-memory in training.",
    7: "reproducibility.",
    8: "trains well, fails in production.",
}
LABS = (
    Lab(
        "autograd",
        "Autograd",
        "What does autograd track, and when is the graph freed?",
        ":material/account_tree:",
        "pages/1_Autograd.py",
        "graph",
    ),
    Lab(
        "gradients",
        "Gradients",
        "Why is a gradient None, zero or huge?",
        ":material/trending_down:",
        "pages/5_Gradients.py",
    ),
    Lab(
        "modes",
        "Modes",
        "train() or eval(), no_grad or inference_mode: what does each switch change?",
        ":material/toggle_on:",
        "pages/2_Modes.py",
    ),
    Lab(
        "memory",
        "Memory",
        "What fills memory in training, and what runs out first?",
        ":material/memory:",
        "pages/4_Memory.py",
    ),
    Lab(
        "profiler",
        "Profiler",
        "Where does a slow training step spend its time?",
        ":material/timer:",
        "pages/3_Profiler.py",
    ),
    Lab(
        "ddp",
        "DDP",
        "What does DistributedDataParallel do that several GPUs alone do not?",
        ":material/hub:",
        "pages/6_DDP.py",
        "graph",
    ),
    Lab(
        "reproducibility",
        "Reproducibility",
        "Can you run the same experiment twice and get the same numbers?",
        ":material/replay:",
        "pages/7_Reproducibility.py",
    ),
    Lab(
        "serving",
        "Serving",
        "Why does a model that trained well fail in production?",
        ":material/rocket_launch:",
        "pages/8_Serving.py",
    ),
    Lab(
        "scale",
        "Real scale",
        "Will fine-tuning a real model, such as Llama-3-8B, fit on my GPU, and what do I change if not?",
        ":material/dns:",
        "pages/10_Real_scale.py",
    ),
    Lab(
        "drills",
        "Fix the loop",
        "This loop trains badly: can you find the bug from its symptoms, and prove the fix?",
        ":material/build:",
        "pages/12_Fix_the_loop.py",
    ),
    Lab(
        "compile",
        "Compile",
        "Would torch.compile speed up this step? Where does it break, recompile, pay back?",
        ":material/bolt:",
        "pages/13_Compile.py",
        extends=5,
    ),
    Lab(
        "precision",
        "Precision",
        "Would mixed precision help? What do fp16, bf16 and GradScaler do to a step?",
        ":material/straighten:",
        "pages/14_Precision.py",
        extends=6,
    ),
    Lab(
        "tensors",
        "Tensor drills",
        "Can you turn this tensor into that one, and say which of your steps copy?",
        ":material/view_in_ar:",
        "pages/16_Tensor_drills.py",
        "task",  # a puzzle's task and input shapes: its trace is drawn once an answer is checked
    ),
    Lab(
        "evidence",
        "GPU evidence",
        "Here is a real GPU trace: what bounds the step, where does the CPU wait, is communication hidden?",
        ":material/memory:",
        "pages/17_GPU_evidence.py",
        extends=5,
    ),
    Lab(
        "slowstep",
        "Slow step",
        "Why is this training step slow? Point at the evidence, pick a fix, and measure whether it paid.",
        ":material/speed:",
        "pages/18_Slow_step.py",
        extends=5,
    ),
)


def lab(slug: str) -> Lab:
    return next(lab for lab in LABS if lab.slug == slug)
