"""The mock interview's follow-ups, made concrete for each lab.

An interviewer's three usual pushes (a part of the system fails, the cost doubles, an input
breaks an assumption) mean something different after each question: after DDP the part that
fails is a rank, after Serving it is a batch of one. Each lab gets its own three, one per kind,
so a challenge always fits the question it follows.
"""

from __future__ import annotations

KINDS = ("fails", "cost", "input")  # a set gives each of its questions a different kind

BY_LAB: dict[str, dict[str, str]] = {
    "autograd": {
        "fails": "A second backward() on the same graph raises. What was freed, and what do you change?",
        "cost": "Memory doubles after you add a logging line that keeps the loss. Where do you look first?",
        "input": "The input arrives with requires_grad=False and a layer is frozen. Which gradients still exist?",
    },
    "gradients": {
        "fails": "The loss goes to nan at step 300 of a run that trained fine. What do you check, in what order?",
        "cost": "Someone proposes clipping at 0.01 to be safe. What does it cost the training, and how do you see it?",
        "input": "A new layer's weight has .grad None after backward. Which three causes do you rule out first?",
    },
    "modes": {
        "fails": "Validation accuracy changes every time you run it on the same data. What was left on?",
        "cost": "Someone proposes inference_mode instead of no_grad for serving. What does it forbid later?",
        "input": "Serving calls the model with a batch of one and BatchNorm is in train mode. What happens?",
    },
    "memory": {
        "fails": "The job dies with out-of-memory at step 2 after step 1 ran. What was not there in step 1?",
        "cost": "The batch size must double on the same GPU. What do you cut first, and what does each cut cost?",
        "input": "Sequences get 4x longer. Which part of memory grows, by how much, and which stays put?",
    },
    "profiler": {
        "fails": "The DataLoader worker dies halfway through an epoch. What does the profile show, and the user?",
        "cost": "A step got 2x slower after an upgrade. Which trace view do you open first, and what do you compare?",
        "input": "The profile shows a long gap between ops with nothing running. What could be in the gap?",
    },
    "ddp": {
        "fails": "One rank times out in the all-reduce while the others wait. What do you look at, and what ends it?",
        "cost": "Going from 2 to 8 GPUs made training 3x faster, not 4x. Where does the rest of the time go?",
        "input": "The dataset does not divide evenly across ranks. What does each rank train on, and what breaks?",
    },
    "reproducibility": {
        "fails": "The checkpoint you resume from is missing its optimizer state. What differs after resuming?",
        "cost": "Deterministic algorithms make the step 30% slower. When do you pay it, and when not?",
        "input": "The same seed gives different numbers on another GPU model. Is that a bug? What do you promise?",
    },
    "serving": {
        "fails": "The preprocessing service is updated and the accuracy drops with no error. How do you notice?",
        "cost": "Latency doubles at peak traffic. What do you batch, cache or drop?",
        "input": "A batch of one arrives at serving time. Which layers behave differently, and what does the user see?",
    },
    "scale": {
        "fails": "The plan fits with ZeRO-2, yet a rank runs out of memory. What did the plan not count?",
        "cost": "The GPUs you planned for cost twice as much. Which change keeps the model training on half as many?",
        "input": "The context length goes from 2k to 8k tokens. Which part of your memory plan breaks first?",
    },
    "drills": {
        "fails": "Your fix makes the symptom go away but the loss curve still differs. What do you check next?",
        "cost": "The loop must run 2x faster without changing what it learns. What do you keep, what do you drop?",
        "input": "The last batch of the epoch has one sample. Which lines of the loop does that break?",
    },
    "compile": {
        "fails": "The compiled model recompiles on every call in production. How do you find out why?",
        "cost": "Compiling takes 3 minutes and the job restarts often. When does compiling still pay?",
        "input": "Batch sizes start varying at serving time. What does torch.compile do, and what do you set?",
    },
    "precision": {
        "fails": "Under fp16 the loss becomes inf after a few hundred steps. What do you look at first?",
        "cost": "Mixed precision saved less memory than you promised. Where did the savings go?",
        "input": "Gradients of a new loss are around 1e-8. What happens to them in fp16, and in bf16?",
    },
    "tensors": {
        "fails": "Your reshape works in the notebook and raises in the model after someone adds a transpose. Why?",
        "cost": "The (B, T, D) tensor is expanded to (B, T, T, D) for pairwise scores. What does it cost, and when?",
        "input": "The batch holds a single sequence of length 1. Which of your broadcasts changes meaning?",
    },
    "slowstep": {
        "fails": "Your fix made the step 30% faster and the loss curve changed. Do you ship it? What do you check?",
        "cost": "The profile shows the optimizer at 40% of the step. Which numbers do you want before touching it?",
        "input": "The same job is fast on a GPU box and slow on a CPU box. Which phase do you compare first, and why?",
    },
    "evidence": {
        "fails": "A GPU job's trace shows the GPU idle 60% of the step. What do you look at next, and in what order?",
        "cost": "Adding a loss logger slowed each step by 30 ms on the GPU. What in the trace shows why?",
        "input": "The trace a colleague sends has no kernels in it. What was wrong with how it was recorded?",
    },
}


def challenge(lab_slug: str, kind: str) -> str:
    return BY_LAB[lab_slug][kind]
