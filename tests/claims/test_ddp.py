"""Every sentence the DDP lab shows, checked against torch code written here, not against the lab's helpers.

The lab's recipe, rebuilt by hand: one generator seeded with the seed draws w_true (8 x 1) / sqrt(8),
then x (N x 8); y = sin(3 x w_true). The model is Linear(8, 16), Tanh, Linear(16, 1) created after
torch.manual_seed(seed) (rank 0's, which DDP broadcasts); the loss is the mean squared error, SGD
with lr 0.1. Shards come from a DistributedSampler built here; DDP's buckets from its documented rule.
"""

import math
import re
import threading

import pytest
import torch
from torch import nn
from torch.utils.data import DistributedSampler

from explorers import ddp
from explorers.ddp import card, lesson
from explorers.ddp.settings import COLLECTIVE_TIMEOUT_S

LR = 0.1
TOLERANCE = 1e-5

CASES = {
    "padding": {"world_size": 4, "per_rank_batch": 2, "dataset_size": 10},  # the page's opening run
    "accumulation": {
        "world_size": 2,
        "per_rank_batch": 2,
        "dataset_size": 9,
        "accumulation": 2,
        "shuffle": True,
        "set_epoch": False,
        "bucket_cap_mb": 0.00005,
        "seed": 5,
    },
    "set_epoch": {"world_size": 2, "per_rank_batch": 4, "dataset_size": 8, "shuffle": True, "seed": 2},
    "join": {"sharding": "strided", "per_rank_batch": 2, "dataset_size": 9, "epochs": 1},
    "no_join": {"sharding": "strided", "per_rank_batch": 2, "dataset_size": 9, "join": False},
    "default": {},
    "torchrun": {"launcher": "torchrun"},
}


@pytest.fixture(scope="module")
def runs():
    """Every case at once, from threads (each is a real multi-process job)."""
    found = {}

    def run(name):
        found[name] = ddp.train(**CASES[name])

    threads = [threading.Thread(target=run, args=(name,)) for name in CASES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    return found


def data(n, seed):
    generator = torch.Generator().manual_seed(seed)
    w_true = torch.randn(8, 1, generator=generator) / math.sqrt(8)
    x = torch.randn(n, 8, generator=generator)
    return x, torch.sin(3 * x @ w_true)


def model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).double()


def flat(tensors):
    return torch.cat([t.detach().reshape(-1).double() for t in tensors])


def shards(options, epoch=0):
    sampler = [
        DistributedSampler(
            range(options.dataset_size),
            num_replicas=options.world_size,
            rank=r,
            shuffle=options.shuffle,
            seed=options.seed,
            drop_last=options.drop_last,
        )
        for r in range(options.world_size)
    ]
    for s in sampler:
        s.set_epoch(epoch)
    return [list(s) for s in sampler]


def sentence(lines, pattern):
    found = [line for line in lines if re.search(pattern, line)]
    assert len(found) == 1, f"expected one sentence matching {pattern!r}, got {found}"
    return found[0]


def number(text):
    return float(text.replace("**", ""))


# --- The claims ---------------------------------------------------------------------------------


def padding_repeats_the_first_indices(runs):
    run = runs["padding"]
    line = sentence(lesson.explain(run), "^DistributedSampler: 10 samples")
    expected = shards(run.options)
    assert [list(r.sampler_orders[0]) for r in run.ranks] == expected
    seen = {}
    for r, shard in enumerate(expected):
        for i in shard:
            seen.setdefault(i, []).append(r)
    repeated = {i: owners for i, owners in seen.items() if len(owners) > 1}
    assert repeated == {0: [0, 2], 1: [1, 3]}
    assert "padded its list to 12 (3, 3, 3, 3 per rank) by repeating its first 2 entries" in line
    assert "indices 0 (ranks 0 and 2), 1 (ranks 1 and 3) were trained on twice" in line


def local_gradients_are_each_ranks_own_batch_gradient(runs):
    run = runs["padding"]
    x, y = data(10, 0)
    for rank in run.ranks:
        net = model(0)
        chosen = torch.tensor(rank.indices[0])
        nn.functional.mse_loss(net(x[chosen].double()), y[chosen].double()).backward()
        assert torch.allclose(rank.local_grads[0], flat(p.grad for p in net.parameters()), atol=1e-6)


def averaging_sentence_quotes_the_measured_gap(runs):
    run = runs["padding"]
    line = sentence(lesson.explain(run), "^After each backward")
    gap = number(re.search(r"local gradients to (\S+?):", line).group(1))
    measured = 0.0
    for s in range(len(run.ranks[0].steps)):
        mean = sum(r.local_grads[s] for r in run.ranks) / run.world_size
        for r in run.ranks:
            assert torch.equal(r.synced_grads[s], run.ranks[0].synced_grads[s])
            measured = max(measured, float((r.synced_grads[s] - mean).abs().max()))
    assert "all 4 ranks held exactly the same gradient over 4 steps" in line
    assert gap == pytest.approx(measured, rel=0.06) and measured < 1e-6


def single_process_matches_to_float_tolerance(runs):
    run = runs["padding"]
    line = sentence(lesson.explain(run), "^One process trained on the same combined batches")
    quoted = number(re.search(r"within \*\*(\S+)\*\*", line).group(1))
    x, y = data(10, 0)
    reference, ddp_params = model(0), flat(model(0).parameters())
    optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
    step = 0
    for epoch in range(2):
        orders = shards(run.options, epoch)
        for batch in range(2):  # 3 samples per rank, batches of 2: [2, 1]
            combined = [i for order in orders for i in order[batch * 2 : batch * 2 + 2]]
            optimizer.zero_grad()
            nn.functional.mse_loss(reference(x[combined].double()), y[combined].double()).backward()
            optimizer.step()
            ddp_params = ddp_params - LR * run.ranks[0].synced_grads[step]  # DDP's update from its synced gradient
            step += 1
    gap = float((flat(reference.parameters()) - ddp_params).abs().max())
    assert quoted < TOLERANCE and gap < TOLERANCE and "to float tolerance" in line
    assert run.ranks[0].final_param_sum == pytest.approx(float(ddp_params.sum()), abs=1e-5)


def effective_batch_is_spelled_out(runs):
    run = runs["padding"]
    line = sentence(lesson.explain(run), "^Effective batch")
    per_step = []
    for epoch in range(2):
        for batch in range(2):
            per_step.append(sum(len(order[batch * 2 : batch * 2 + 2]) for order in shards(run.options, epoch)))
    assert per_step == [8, 4, 8, 4]
    assert "2 per rank × 4 ranks × 1 accumulation = **8** samples" in line and "had 8, 4, 8, 4" in line


def without_set_epoch_every_epoch_repeats_its_order(runs):
    run = runs["accumulation"]
    line = sentence(lesson.explain(run), "^Without set_epoch")
    order = shards(run.options, 0)[0]  # the sampler's epoch stays 0 when nobody calls set_epoch
    assert shards(run.options, 1)[0] != order  # what set_epoch(1) would have given
    assert f"rank 0 saw {', '.join(map(str, order))} in epoch 0 and again {', '.join(map(str, order))}" in line
    assert list(run.ranks[0].sampler_orders[1]) == order


def set_epoch_reshuffles(runs):
    run = runs["set_epoch"]
    line = sentence(lesson.explain(run), "^set_epoch reshuffled")
    first, second = shards(run.options, 0)[0], shards(run.options, 1)[0]
    assert first != second
    assert f"saw {', '.join(map(str, first))} in epoch 0, then {', '.join(map(str, second))}" in line
    assert [list(o) for o in run.ranks[0].sampler_orders] == [first, second]


def no_sync_communicates_once_per_k(runs):
    run = runs["accumulation"]
    line = sentence(lesson.explain(run), "^Rank 0 trained on")
    samples = math.ceil(9 / 2)  # the sampler pads to 5 per rank
    batches = math.ceil(samples / 2)  # 3 micro-batches per epoch: groups of 2, then 1
    micro, synced = 2 * batches, 2 * math.ceil(batches / 2)
    assert f"trained on {micro} micro-batches and all-reduced after {synced} of them" in line
    assert f"the other {micro - synced} only added" in line


def buckets_follow_ddps_size_rule(runs):
    run = runs["accumulation"]
    line = sentence(lesson.explain(run), "^bucket_cap_mb=")
    cap = int(0.00005 * 2**20)  # DDP reads bucket_cap_mb in MiB
    buckets, current = [], 0
    for numel in reversed([128, 16, 16, 1]):  # parameters in reverse order, float32
        current += numel * 4
        if current >= cap:
            buckets.append(current)
            current = 0
    buckets += [current] if current else []
    assert buckets == [68, 64, 512]
    assert "first step all-reduced all 644 B of gradients in 1 bucket(s)" in line
    assert "made 3 all-reduce calls (68 B, 64 B, 512 B)" in line


def join_shadows_the_missing_steps(runs):
    run = runs["join"]
    line = sentence(lesson.explain(run), "^With Join every rank finished")
    sizes = [len(range(r, 9, 2)) for r in range(2)]  # the strided shards: 5 and 4 samples
    batches = [math.ceil(s / 2) for s in sizes]
    assert f"rank 1 shadowed {batches[0] - batches[1]} all-reduce" in line
    assert all(r.outcome == "finished" for r in run.ranks)
    uneven = sentence(lesson.explain(run), "^Uneven inputs")
    assert f"the ranks had {batches[0]}, {batches[1]} micro-batches" in uneven


def without_join_collectives_pair_by_order_then_time_out(runs):
    run = runs["no_join"]
    lines = lesson.explain(run)
    # Rank 0 has 3 batches per epoch, rank 1 two: their n-th all-reduces, listed here by hand.
    calls = [[(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5)], [(0, 0), (0, 1), (1, 2), (1, 3)]]
    first_mismatch = next(n for n in range(4) if calls[0][n] != calls[1][n])
    pairing = sentence(lines, f"^All-reduce call {first_mismatch + 1} paired")
    assert "rank 0: epoch 0 step 2; rank 1: epoch 1 step 2" in pairing
    timeout = sentence(lines, "gave up after the process group's")
    assert f"{COLLECTIVE_TIMEOUT_S:g} s timeout" in timeout
    for rank in run.ranks:
        waited = rank.finished_at - max(c.start for c in rank.collectives)
        if "Timed out" in (rank.error or ""):
            assert COLLECTIVE_TIMEOUT_S - 0.5 < waited < COLLECTIVE_TIMEOUT_S + 5
    assert run.outcome == "failed"


def timing_sentence_adds_up(runs):
    run = runs["padding"]
    line = sentence(lesson.explain(run), "^Of the run's")
    total, launch, share = re.search(r"run's (\S+) s, starting the processes took (\S+) s \(\*\*(\d+)%", line).groups()
    start = run.launch_started_at
    assert float(total) == pytest.approx(run.launch_ended_at - start, abs=0.06)  # printed to 2 decimals (1 past 10 s)
    slowest = max(r.ready_at for r in run.ranks) - start
    assert float(launch) == pytest.approx(slowest, abs=0.06)
    assert int(share) == round(100 * slowest / (run.launch_ended_at - start))


def prediction_evidence_is_this_runs_sampler(runs):
    run = runs["padding"]
    prediction = card.padding_prediction(run)
    orders = shards(run.options)
    assert prediction.answer == card.FIRST_REPEAT
    assert "appended the first 2 entries of its list (0, 1) again" in prediction.evidence
    for r, order in enumerate(orders):
        assert f"rank {r}: {order}" in prediction.evidence


def answer_card_quotes_the_run(runs):
    run = runs["padding"]
    evidence = card.answer_card(run).evidence
    assert "Padded indices: 0, 1." in evidence and "Effective batch 8." in evidence
    assert f"Against one process on the combined batches: {lesson.sci(run.single_process_max_diff)}" in evidence


def torchrun_runs_the_same_script_to_the_same_result(runs):
    ours, theirs = runs["default"], runs["torchrun"]
    assert theirs.launcher == "torchrun" and theirs.outcome == "finished"
    assert [r.indices for r in ours.ranks] == [r.indices for r in theirs.ranks]
    for a, b in zip(ours.ranks, theirs.ranks, strict=True):
        for s in range(len(a.steps)):
            assert torch.allclose(a.synced_grads[s], b.synced_grads[s], atol=1e-6)
    assert theirs.single_process_max_diff < TOLERANCE
    assert "torchrun's agent" in sentence(lesson.explain(theirs), "^Of the run's")


CLAIMS = [
    pytest.param(padding_repeats_the_first_indices, id="padding-repeats-first-indices"),
    pytest.param(local_gradients_are_each_ranks_own_batch_gradient, id="local-gradients-are-real"),
    pytest.param(averaging_sentence_quotes_the_measured_gap, id="averaged-gradient"),
    pytest.param(single_process_matches_to_float_tolerance, id="single-process-equivalence"),
    pytest.param(effective_batch_is_spelled_out, id="effective-batch"),
    pytest.param(without_set_epoch_every_epoch_repeats_its_order, id="no-set-epoch-same-order"),
    pytest.param(set_epoch_reshuffles, id="set-epoch-reshuffles"),
    pytest.param(no_sync_communicates_once_per_k, id="no-sync-once-per-k"),
    pytest.param(buckets_follow_ddps_size_rule, id="bucket-sizes"),
    pytest.param(join_shadows_the_missing_steps, id="join-shadows"),
    pytest.param(without_join_collectives_pair_by_order_then_time_out, id="no-join-timeout"),
    pytest.param(timing_sentence_adds_up, id="launch-share"),
    pytest.param(prediction_evidence_is_this_runs_sampler, id="predict-evidence"),
    pytest.param(answer_card_quotes_the_run, id="answer-card-evidence"),
    pytest.param(torchrun_runs_the_same_script_to_the_same_result, id="torchrun-same-result"),
]


@pytest.mark.parametrize("claim", CLAIMS)
def test_claim(claim, runs):
    claim(runs)
