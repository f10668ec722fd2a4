"""Slow step's claims: every drill at 3 seeds shows its planted bottleneck, its right fix pays beyond the noise,
every other fix offered is judged by its own measurement; and each mechanism Statement, tried against PyTorch."""

from __future__ import annotations

import copy
import io
import os
import statistics
import time

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint

from explorers.slowstep import lesson, measure
from explorers.slowstep.catalogue import DRILLS, FIXES
from explorers.slowstep.lesson import STATEMENTS
from explorers.slowstep.loops import BATCH, Block, Net
from tests.claims.falsify import falsifies

SEEDS = (0, 1, 2)
WRONG_FIX_SEED = 3
TRIES = 3  # a busy machine may blur a measurement; the lab then says so and offers another


def shown_run(name: str, seed: int) -> measure.EvidenceRun:
    for _ in range(TRIES):
        run = measure.evidence_run(name, seed)
        if run.shown:
            return run
    return run


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", DRILLS)
def test_the_planted_bottleneck_is_what_the_evidence_shows_and_the_loop_is_otherwise_correct(name, seed):
    drill = DRILLS[name]
    run = shown_run(name, seed)
    assert run.shown, (run.extra_ms(), {p: run.extra_ms(p) for p in measure.PHASES})
    assert run.answer_phases and set(run.answer_phases) <= set(drill.planted), run.answer_phases
    leader = max(measure.PHASES, key=lambda p: run.extra_ms(p)[0])
    assert leader in drill.planted
    ops = [row for row in run.evidence.ops if f"op:{row.key}" in run.answers]
    assert ops and {row.phase for row in ops} <= set(drill.planted), [row.key for row in ops]
    # The slow loop trains as the correct one: the same losses, step by step (float64 to float rounding).
    differences = [abs(a - b) / abs(a) for a, b in zip(run.losses, run.correct_losses, strict=True)]
    assert max(differences) <= measure.LOSS_TOLERANCE


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", DRILLS)
def test_the_right_fix_pays_beyond_the_noise_and_keeps_training_the_same(name, seed):
    for _ in range(TRIES):
        fixed = measure.fix_run(name, seed, DRILLS[name].fix)
        if fixed.verdict == "faster":
            break
    saved, noise = fixed.saved_ms
    assert fixed.verdict == "faster" and saved > noise, (saved, noise)
    assert fixed.same_training, fixed.loss_difference
    assert "saved" in lesson.fix_line(fixed) and "changed training" not in lesson.fix_line(fixed)


@pytest.mark.parametrize("name", DRILLS)
def test_every_other_offered_fix_is_judged_by_its_own_measurement_and_gains_less_than_the_right_one(name):
    drill = DRILLS[name]
    right = measure.fix_run(name, WRONG_FIX_SEED, drill.fix)
    for key in drill.options_shown(WRONG_FIX_SEED):
        if key == drill.fix:
            continue
        run = measure.fix_run(name, WRONG_FIX_SEED, key)
        saved, noise = run.saved_ms
        line = lesson.fix_line(run)
        assert ("no measurable gain" in line) == (abs(saved) <= noise), line
        assert ("as fast" in line) == (saved > noise), line
        assert ("slower than the loop as it was" in line) == (saved < -noise), line
        assert ("changed training" in line) == (not run.same_training), line
        assert saved < right.saved_ms[0], (key, saved, right.saved_ms)
        if key == "larger_lr":
            assert not run.same_training  # a larger learning rate is another recipe


# --- The Statements -------------------------------------------------------------------------------


class _Where(torch.utils.data.Dataset):
    """Each sample says which process made it, and whether a worker did."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i):
        return torch.tensor([os.getpid(), torch.utils.data.get_worker_info() is not None])


@falsifies(STATEMENTS["workers"])
def test_getitem_runs_in_the_training_process_without_workers_and_in_others_with_them():
    main = os.getpid()
    alone = torch.cat(list(torch.utils.data.DataLoader(_Where(), batch_size=4, num_workers=0)))
    assert set(alone[:, 0].tolist()) == {main} and not alone[:, 1].any()
    loader = torch.utils.data.DataLoader(_Where(), batch_size=4, num_workers=2, multiprocessing_context="forkserver")
    helped = torch.cat(list(loader))
    assert main not in set(helped[:, 0].tolist()) and helped[:, 1].all()


class _Counting(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.calls = 0

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i):
        self.calls += 1
        return torch.zeros(2)


@falsifies(STATEMENTS["statistics_once"])
def test_getitem_runs_once_per_sample_of_every_batch():
    dataset = _Counting()
    batches = iter(torch.utils.data.DataLoader(dataset, batch_size=BATCH))
    for _ in range(3):
        next(batches)
    assert dataset.calls == 3 * BATCH


def _median_ms(fn, repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


@falsifies(STATEMENTS["tensor_rows"])
def test_a_tensor_from_nested_lists_takes_time_per_number_and_gathering_rows_of_a_tensor_does_not():
    rows = torch.randn(4 * BATCH, 256)
    index = torch.arange(BATCH)
    small, large = rows[:BATCH].tolist(), rows.tolist()
    assert torch.equal(torch.tensor(small), rows.index_select(0, index))
    per_batch = _median_ms(lambda: torch.tensor(small))
    assert _median_ms(lambda: torch.tensor(large)) > 3 * per_batch  # four times the numbers
    assert per_batch > 10 * _median_ms(lambda: rows.index_select(0, index))


@falsifies(STATEMENTS["float32"])
def test_float32_is_the_default_and_float64_matrix_products_are_slower_at_the_drill_sizes():
    assert torch.get_default_dtype() == torch.float32
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a32, b32 = torch.randn(BATCH, 256), torch.randn(256, 256)
        a64, b64 = a32.double(), b32.double()
        pairs = [(_median_ms(lambda: [a64 @ b64 for _ in range(50)], 3),
                  _median_ms(lambda: [a32 @ b32 for _ in range(50)], 3)) for _ in range(5)]  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    assert statistics.median(slow / fast for slow, fast in pairs) > 1.2


def _count(fn, name: str) -> int:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(1 for e in prof.events() if e.name == name)


@falsifies(STATEMENTS["batched"])
def test_a_loop_over_samples_makes_batch_size_times_the_calls_for_the_same_output():
    torch.manual_seed(0)
    model, x = Net(checkpointing=False), torch.randn(16, 256)
    looped = lambda: torch.cat([model(sample[None]) for sample in x])  # noqa: E731
    assert torch.allclose(looped(), model(x), atol=1e-5)
    assert _count(looped, "aten::addmm") == len(x) * _count(lambda: model(x), "aten::addmm")


@falsifies(STATEMENTS["anomaly_off"])
def test_anomaly_detection_keeps_a_traceback_per_node_and_checks_gradients_for_nan():
    x = torch.randn(4, requires_grad=True)
    with torch.autograd.detect_anomaly():
        assert "traceback_" in (x * 2).sum().grad_fn.metadata
        with pytest.raises(RuntimeError, match="nan"):
            (x * 0).div(0 * x).sum().backward()  # 0/0: a NaN gradient
    assert "traceback_" not in (x * 2).sum().grad_fn.metadata
    (x * 0).div(0 * x).sum().backward()  # outside it, the NaN passes unchecked
    assert x.grad.isnan().any()


@falsifies(STATEMENTS["no_checkpointing"])
def test_checkpointing_runs_the_block_forward_again_in_backward():
    block, x = Block(), torch.randn(BATCH, 256, requires_grad=True)
    plain = _count(lambda: block(x).sum().backward(), "aten::addmm")
    for reentrant in (False, True):
        again = _count(lambda r=reentrant: checkpoint(block, x, use_reentrant=r).sum().backward(), "aten::addmm")
        assert again == 2 * plain  # the block's two Linear layers: each forward addmm runs twice


@falsifies(STATEMENTS["ema_in_place"])
def test_deepcopy_makes_new_tensors_and_an_in_place_lerp_writes_the_same_ones_to_the_same_values():
    torch.manual_seed(0)
    model = Net(checkpointing=False)
    ema = copy.deepcopy(model).requires_grad_(False)
    fresh = copy.deepcopy(model)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(fresh.parameters(), model.parameters(), strict=True))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
        blended = [0.01 * p + 0.99 * e for p, e in zip(model.parameters(), ema.parameters(), strict=True)]
        pointers = [e.data_ptr() for e in ema.parameters()]
        torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 0.01)
    assert [e.data_ptr() for e in ema.parameters()] == pointers
    assert all(torch.allclose(e, b, atol=1e-6) for e, b in zip(ema.parameters(), blended, strict=True))


@falsifies(STATEMENTS["vector_metrics"])
def test_a_python_loop_over_the_batch_makes_batch_size_times_the_calls_for_the_same_count():
    out, y = torch.randn(BATCH, 10), torch.randint(0, 10, (BATCH,))
    looped = lambda: sum(int(out[i].argmax() == y[i]) for i in range(len(y)))  # noqa: E731
    whole = lambda: int((out.argmax(1) == y).sum())  # noqa: E731
    assert looped() == whole()
    assert _count(looped, "aten::argmax") == BATCH * _count(whole, "aten::argmax")
    assert _count(looped, "aten::item") == BATCH * _count(whole, "aten::item")


@falsifies(STATEMENTS["save_less"])
def test_save_writes_the_weights_and_adamw_s_two_moments_each_call():
    model = Net(checkpointing=False)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 256)).sum().backward()
    optimizer.step()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    state = optimizer.state_dict()["state"]
    assert all({"exp_avg", "exp_avg_sq"} <= set(s) for s in state.values()) and len(state) == len(
        list(model.parameters())
    )
    sizes = []
    for _ in range(2):
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
        sizes.append(buffer.tell())
    assert sizes[0] == sizes[1] >= 3 * weights


def test_the_item_sentence_is_the_gpu_evidence_lab_s_own_statement():
    from explorers.evidence.lesson import STATEMENTS as GPU

    assert lesson.SYNC is GPU["sync"]
    assert FIXES["log_less"].reflex


@falsifies(STATEMENTS["augment_batch"])
def test_one_grouped_conv1d_per_pass_does_the_per_sample_smoothing_in_one_call():
    from explorers.slowstep.loops import HEAVY_AUGMENT_PASSES, kernels, smooth, smooth_batch

    x = torch.randn(BATCH, 256)
    kernel = kernels(seed=5, positions=list(range(100, 100 + BATCH)))
    per_sample = lambda: torch.stack([smooth(row, k) for row, k in zip(x, kernel, strict=True)])  # noqa: E731
    assert torch.allclose(per_sample(), smooth_batch(x, kernel), atol=1e-5)
    assert _count(per_sample, "aten::conv1d") == BATCH * HEAVY_AUGMENT_PASSES
    assert _count(lambda: smooth_batch(x, kernel), "aten::conv1d") == HEAVY_AUGMENT_PASSES
