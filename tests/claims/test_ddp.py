"""Every sentence the DDP lab shows, checked against torch code written here, not against the lab's helpers.

The lab's recipe, rebuilt by hand: one generator seeded with the seed draws w_true (8 x 1) / sqrt(8),
then x (N x 8); y = sin(3 x w_true). The model is Linear(8, 16), Tanh, Linear(16, 1) created after
torch.manual_seed(seed) (rank 0's, which DDP broadcasts); the loss is the mean squared error, SGD
with lr 0.1. Shards come from a DistributedSampler built here; DDP's buckets from its documented rule.
"""

import datetime
import json
import math
import pathlib
import re
import threading
from collections import Counter

import pytest
import torch
from torch import nn
from torch.utils.data import DistributedSampler

from explorers import ddp, units
from explorers.ddp import card, figures, lesson
from explorers.ddp.lesson import STATEMENTS
from explorers.ddp.settings import COLLECTIVE_TIMEOUT_S
from tests.claims.falsify import falsifies
from tests.zoo import ZOO, call

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
    # The audit's settings (the page's opening run with another knob turned):
    "strided": {"world_size": 4, "per_rank_batch": 2, "sharding": "strided"},
    "strided_accumulation": {"world_size": 4, "per_rank_batch": 2, "sharding": "strided", "accumulation": 2},
    "three_steps": {"world_size": 4, "per_rank_batch": 2, "steps": 3, "shuffle": True, "set_epoch": False},
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


def test_padding_repeats_the_first_indices(runs):
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


def test_local_gradients_are_each_ranks_own_batch_gradient(runs):
    run = runs["padding"]
    x, y = data(10, 0)
    for rank in run.ranks:
        net = model(0)
        chosen = torch.tensor(rank.indices[0])
        nn.functional.mse_loss(net(x[chosen].double()), y[chosen].double()).backward()
        assert torch.allclose(rank.local_grads[0], flat(p.grad for p in net.parameters()), atol=1e-6)


def test_averaging_sentence_quotes_the_measured_gap(runs):
    run = runs["padding"]
    line = sentence(lesson.explain(run), "^After each step's all-reduce")
    gap = number(re.search(r"local gradients to (\S+?):", line).group(1))
    measured = 0.0
    for s in range(len(run.ranks[0].steps)):
        mean = sum(r.local_grads[s] for r in run.ranks) / run.world_size
        for r in run.ranks:
            assert torch.equal(r.synced_grads[s], run.ranks[0].synced_grads[s])
            measured = max(measured, float((r.synced_grads[s] - mean).abs().max()))
    assert "all 4 ranks held exactly the same gradient over 4 steps" in line
    assert gap == pytest.approx(measured, rel=0.06) and measured < 1e-6


def test_single_process_matches_to_float_tolerance(runs):
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


def test_effective_batch_is_spelled_out(runs):
    run = runs["padding"]
    line = sentence(lesson.explain(run), "^Effective batch")
    per_step = []
    for epoch in range(2):
        for batch in range(2):
            per_step.append(sum(len(order[batch * 2 : batch * 2 + 2]) for order in shards(run.options, epoch)))
    assert per_step == [8, 4, 8, 4]
    assert "2 per rank × 4 ranks × 1 accumulation = **8** samples" in line and "had 8, 4, 8, 4" in line


def test_without_set_epoch_every_epoch_repeats_its_order(runs):
    run = runs["accumulation"]
    line = sentence(lesson.explain(run), "^Without set_epoch")
    order = shards(run.options, 0)[0]  # the sampler's epoch stays 0 when nobody calls set_epoch
    assert shards(run.options, 1)[0] != order  # what set_epoch(1) would have given
    listed = ", ".join(map(str, order))
    assert f"rank 0's sampler listed {listed} in epoch 0 and again {listed}" in line
    assert list(run.ranks[0].sampler_orders[1]) == order


def test_set_epoch_reshuffles(runs):
    run = runs["set_epoch"]
    line = sentence(lesson.explain(run), "^set_epoch reshuffled")
    first, second = shards(run.options, 0)[0], shards(run.options, 1)[0]
    assert first != second
    assert f"listed {', '.join(map(str, first))} in epoch 0, then {', '.join(map(str, second))}" in line
    assert [list(o) for o in run.ranks[0].sampler_orders] == [first, second]


def test_no_sync_communicates_once_per_k(runs):
    run = runs["accumulation"]
    line = sentence(lesson.explain(run), "^Rank 0 trained on")
    samples = math.ceil(9 / 2)  # the sampler pads to 5 per rank
    batches = math.ceil(samples / 2)  # 3 micro-batches per epoch: groups of 2, then 1
    micro, synced = 2 * batches, 2 * math.ceil(batches / 2)
    assert f"trained on {micro} micro-batches and all-reduced after {synced} of them" in line
    assert f"the other {micro - synced} accumulated into the local `.grad` without communicating" in line


def test_buckets_follow_ddps_size_rule(runs):
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


def test_join_shadows_the_missing_steps(runs):
    run = runs["join"]
    line = sentence(lesson.explain(run), "^With Join every rank finished")
    sizes = [len(range(r, 9, 2)) for r in range(2)]  # the strided shards: 5 and 4 samples
    batches = [math.ceil(s / 2) for s in sizes]
    assert f"rank 1 shadowed {batches[0] - batches[1]} all-reduce" in line
    assert all(r.outcome == "finished" for r in run.ranks)
    uneven = sentence(lesson.explain(run), "^Uneven inputs")
    assert (
        f"shards held {sizes[0]}, {sizes[1]} samples and the ranks ran {batches[0]}, {batches[1]} micro-batches"
        in uneven
    )


def test_without_join_collectives_pair_by_order_then_time_out(runs):
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


def test_timing_sentence_adds_up(runs):
    run = runs["padding"]
    line = sentence(lesson.explain(run), "^Of the run's")
    total, launch, share = re.search(r"run's (\S+) s, starting the processes took (\S+) s \(\*\*(\d+)%", line).groups()
    start = run.launch_started_at
    assert float(total) == pytest.approx(run.launch_ended_at - start, abs=0.06)  # printed to 2 decimals (1 past 10 s)
    slowest = max(r.ready_at for r in run.ranks) - start
    assert float(launch) == pytest.approx(slowest, abs=0.06)
    assert int(share) == round(100 * slowest / (run.launch_ended_at - start))


def test_prediction_evidence_is_this_runs_sampler(runs):
    run = runs["padding"]
    prediction = card.padding_prediction(run)
    orders = shards(run.options)
    assert prediction.answer == card.FIRST_REPEAT
    assert "appended the first 2 entries of its list (0, 1) again" in prediction.evidence
    for r, order in enumerate(orders):
        assert f"rank {r}: {order}" in prediction.evidence


def test_answer_card_quotes_the_run(runs):
    run = runs["padding"]
    evidence = card.answer_card(run).evidence
    assert "Padded indices: 0, 1." in evidence and "Effective batch 8; the steps had 8, 4, 8, 4 samples." in evidence
    assert "Trained on twice in epoch 0: 0, 1." in evidence
    assert f"Against one process on the combined batches: {units.sci(run.single_process_max_diff)}" in evidence


def test_torchrun_runs_the_same_script_to_the_same_result(runs):
    ours, theirs = runs["default"], runs["torchrun"]
    assert theirs.launcher == "torchrun" and theirs.outcome == "finished"
    assert [r.indices for r in ours.ranks] == [r.indices for r in theirs.ranks]
    for a, b in zip(ours.ranks, theirs.ranks, strict=True):
        for s in range(len(a.steps)):
            assert torch.allclose(a.synced_grads[s], b.synced_grads[s], atol=1e-6)
    assert theirs.single_process_max_diff < TOLERANCE
    assert "torchrun's agent" in sentence(lesson.explain(theirs), "^Of the run's")


# --- Issue 18: every sentence has a witness (settings other than the findings') -------------------------------


def first_batches(world, size, batch, steps):
    """Per rank, the indices its first `steps` batches held: DistributedSampler and DataLoader, by hand."""
    held = []
    for rank in range(world):
        sampler = DistributedSampler(range(size), num_replicas=world, rank=rank, shuffle=False)
        loader = torch.utils.data.DataLoader(range(size), batch_size=batch, sampler=sampler)
        held.append([int(i) for b, chunk in zip(range(steps), loader, strict=False) for i in chunk])
    return held


def test_trained_twice_is_read_off_the_batches_that_ran_not_the_samplers_list():
    run = ddp.train(world_size=3, per_rank_batch=2, dataset_size=8, steps=1, epochs=1)
    held = first_batches(3, 8, 2, steps=1)
    counts = Counter(i for indices in held for i in indices)
    assert max(counts.values()) == 1  # index 0 is listed twice (padding), but its second copy never ran
    line = sentence(lesson.explain(run), "^DistributedSampler: 8 samples")
    assert "trained on twice" not in line
    assert f"held {sum(counts.values())} samples, none of them twice" in line
    heat = figures.sampler_figure(run).data[0]
    assert not any("2×" in label for row in heat.text for label in row)
    assert "Trained on twice" not in card.answer_card(run).evidence

    longer = ddp.train(world_size=3, per_rank_batch=2, dataset_size=8, steps=2, epochs=1)
    twice = {i for i, n in Counter(i for ix in first_batches(3, 8, 2, steps=2) for i in ix).items() if n > 1}
    assert twice == {0}
    assert "index 0 (ranks 0 and 2) was trained on twice in epoch 0" in lesson.explain(longer)[1]


def test_uneven_slices_are_judged_by_the_batches_each_rank_ran():
    run = ddp.train(world_size=3, sharding="strided", per_rank_batch=2, dataset_size=10, epochs=1)
    shards = [len(range(r, 10, 3)) for r in range(3)]
    batches = {math.ceil(n / 2) for n in shards}
    assert shards == [4, 3, 3] and batches == {2}
    line = sentence(lesson.explain(run), "^Each rank took its own slice")
    assert "every rank ran out of data after 2 batches, together" in line
    assert "do not run out of data together" not in line

    uneven = ddp.train(world_size=2, sharding="strided", per_rank_batch=2, dataset_size=7, epochs=1)
    counts = [math.ceil(len(range(r, 7, 2)) / 2) for r in range(2)]  # 4 and 3 samples: 2 and 2 batches
    line = sentence(lesson.explain(uneven), "^Each rank took its own slice")
    assert counts == [2, 2] and "every rank ran out of data after 2 batches" in line


def test_join_does_not_rescue_ranks_that_disagree_on_which_micro_batch_all_reduces():
    run = ddp.train(world_size=2, sharding="strided", per_rank_batch=2, dataset_size=5, accumulation=2, epochs=1)
    batches = [math.ceil(len(range(r, 5, 2)) / 2) for r in range(2)]  # 2 and 1 batches
    first_sync = [min(2, b) - 1 for b in batches]  # the micro-batch whose backward all-reduces
    assert first_sync == [1, 0] and run.options.join
    assert run.outcome == "failed"
    line = sentence(lesson.explain(run), "^At micro-batch 0 of the run")
    assert "rank 1 all-reduced its gradients while rank 0 ran backward under `no_sync()`" in line
    assert STATEMENTS["join_uneven"].scope in line


def test_a_rank_without_a_complete_record_is_unknown_not_zero():
    run = ddp.train(world_size=2, sharding="strided", per_rank_batch=2, dataset_size=5, accumulation=2, epochs=1)
    lines = lesson.explain(run)
    crashed = [r for r in run.ranks if r.error and "left no complete record" in r.error]
    assert crashed, [r.error for r in run.ranks]
    for rank in crashed:
        assert not rank.recorded
        assert not any(f"rank {rank.rank}: made no such call" in line for line in lines)
    assert not any(line.startswith("Rank 0 trained on") for line in lines)  # its micro-batch count is not known
    uneven = [line for line in lines if line.startswith("Uneven inputs")]
    assert all("unknown" in line for line in uneven)


def test_a_call_that_met_no_partner_is_not_said_to_pair_different_work(runs):
    run = runs["no_join"]
    calls = [[(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5)], [(0, 0), (0, 1), (1, 2), (1, 3)]]
    lonely = next(n for n in range(6) if n >= len(calls[1]))  # rank 1 made no such call
    line = sentence(lesson.explain(run), f"^All-reduce call {lonely + 1} ")
    assert "had no partner" in line and "rank 1: made no such call" in line and "different work" not in line
    assert "on every rank" not in line  # rank 1 made no such call: the call was not unanswered on every rank


def recorded_leads_ms(run):
    """From the results file itself: per synchronised backward of rank 0, last gradient time minus first start."""
    rank = json.loads(run.results_json)["ranks"][0]
    leads = []
    for entry in rank["micro_steps"]:
        starts = [c["start"] for c in rank["collectives"] if (c["epoch"], c["step"]) == (entry["epoch"], entry["step"])]
        if entry["synced"] and starts:
            leads.append(((entry["last_gradient_at"] - min(starts)) * 1000, len(starts)))
    return leads


def test_overlap_is_witnessed_by_gradient_and_all_reduce_times():
    one = ddp.train(world_size=3, per_rank_batch=3, dataset_size=12, steps=3, epochs=1)
    leads = recorded_leads_ms(one)
    assert leads and all(buckets == 1 and lead < 0 for lead, buckets in leads)
    line = sentence(lesson.explain(one), "^Every all-reduce started after backward")
    assert "nothing overlapped" in line and "overlaps" not in line

    split = ddp.train(world_size=3, per_rank_batch=3, dataset_size=12, steps=3, epochs=1, bucket_cap_mb=0.0001)
    leads = recorded_leads_ms(split)
    best = max(lead for lead, _ in leads)
    assert best > 0 and max(buckets for _, buckets in leads) > 1
    line = sentence(lesson.explain(split), "started its all-reduce")
    assert float(re.search(r"all-reduce (\S+) ms before", line).group(1)) == pytest.approx(best, abs=0.006)
    assert f"{best:.2f} ms before the last gradient" in card.comparison_rows(split)[4]["This run"]


def test_the_timeout_sentence_gives_each_backends_default(runs):
    line = sentence(lesson.explain(runs["no_join"]), "gave up after the process group's")
    assert "(the default is 30 minutes)" not in line
    assert STATEMENTS["default_timeout"].text in line


# --- The audit of the DDP and Reproducibility labs: sentences at non-default settings --------------------------


def strided_batches(world, size, batch, epochs, steps):
    """Per step, each rank's batch (None once its slice ran out): the slices rank::W, DataLoader order, Join's
    global step count (a step ends when the longest slice's batch does)."""
    slices = [list(range(r, size, world)) for r in range(world)]
    per_epoch = max(math.ceil(len(s) / batch) for s in slices)
    found = []
    for _ in range(epochs):
        for b in range(per_epoch):
            if len(found) == steps:
                return found
            found.append([s[b * batch : b * batch + batch] or None for s in slices])
    return found


def test_synced_gradients_are_the_mean_only_where_every_rank_trained(runs):
    """Finding 1: with Join and uneven slices, a step some ranks had no batch for is the others' sum / W."""
    run = runs["strided"]
    x, y = data(10, 0)
    net, world = model(0), 4
    expected_kinds = {}
    for step, batches in enumerate(strided_batches(world, 10, 2, epochs=2, steps=8)):
        local = []
        for chosen in batches:
            if chosen is None:
                continue
            net.zero_grad()
            nn.functional.mse_loss(net(x[chosen].double()), y[chosen].double()).backward()
            local.append(flat(p.grad for p in net.parameters()))
        synced = sum(local) / world  # DDP's division by W; a joined rank adds zeros
        recorded = run.ranks[0].synced_grads[step]
        assert torch.allclose(recorded, synced, atol=1e-6), step
        if len(local) < world:
            their_mean = sum(local) / len(local)
            assert (recorded - their_mean).abs().max() > 1e-3  # not the mean of the gradients that were computed
        expected_kinds[step] = len(local)
        with torch.no_grad():
            for p, g in zip(net.parameters(), torch.split(synced, [p.numel() for p in net.parameters()]), strict=True):
                p -= LR * g.reshape(p.shape)
    assert expected_kinds == {0: 4, 1: 2, 2: 4, 3: 2}
    line = sentence(lesson.explain(run), "^After each step's all-reduce")
    assert "Steps 0 and 2: the mean of the 4 local gradients" in line
    assert "Steps 1 and 3: the sum of the local gradients of ranks 0 and 1 divided by 4" in line
    assert "ranks 2 and 3 had no batch in them" in line and "After each backward" not in line
    evidence = card.answer_card(run).evidence
    assert "the local mean" not in evidence
    assert "steps 0 and 2: the mean of the 4 local gradients" in evidence
    assert "steps 1 and 3: the sum of 2 local gradients divided by 4" in evidence
    # With accumulation, the no_sync backwards did not communicate: the sentence is about each step's all-reduce.
    accumulated = sentence(lesson.explain(runs["accumulation"]), "^After each step's all-reduce")
    assert "After each backward" not in accumulated


def test_the_card_keeps_joins_scope_when_the_run_with_join_failed(runs):
    """Finding 2: Join on, accumulation over slices of different lengths: the run fails, so the scope-free promise
    is not shown."""
    run = runs["strided_accumulation"]
    slices = [len(range(r, 10, 4)) for r in range(4)]
    batches = [math.ceil(n / 2) for n in slices]
    first_sync = [min(2, b) - 1 for b in batches]  # the micro-batch whose backward all-reduces first
    assert slices == [3, 3, 2, 2] and first_sync == [1, 1, 0, 0] and run.options.join
    assert run.outcome != "finished"
    recovery = card.answer_card(run).recovery
    assert STATEMENTS["join_uneven"].text not in recovery
    assert STATEMENTS["join_uneven"].scope in recovery
    assert f"This run had Join on and ended **{run.outcome}**" in recovery
    assert "ranks 2 and 3 all-reduced while ranks 0 and 1 ran backward under `no_sync()`" in recovery
    finished = card.answer_card(runs["strided"]).recovery  # a run that finished under Join: the promise, scoped
    assert STATEMENTS["join_uneven"].text in finished and STATEMENTS["join_uneven"].scope in finished


def test_micro_batch_counts_say_what_ran(runs):
    """Finding 3: one definition, the micro-batches each rank ran, from its record; failed and unknown said so."""
    slices = [len(range(r, 10, 4)) for r in range(4)]
    counts = [math.ceil(n / 2) for n in slices]
    finished = sentence(lesson.explain(runs["strided"]), "^Uneven inputs")
    assert f"shards held {', '.join(map(str, slices))} samples" in finished
    assert f"the ranks ran {', '.join(map(str, counts))} micro-batches" in finished

    run = runs["strided_accumulation"]
    lines = lesson.explain(run)
    line = sentence(lines, "^Uneven inputs")
    assert f"shards held {', '.join(map(str, slices))} samples" in line
    assert not re.search(r"ran [\d, ]+ micro-batches", line)  # no rank finished its epoch: no bare counts
    for rank in run.ranks:
        completed = sum(m.epoch == 0 for m in rank.micro_steps)
        started = any(c.micro_batch == len(rank.micro_steps) and not c.shadow for c in rank.collectives)
        if not rank.recorded:
            expected = "unknown (its record ended early)"
        elif started:
            expected = f"{completed}, then failed during the {'first' if completed == 0 else 'next'}"
        else:
            expected = f"{completed}, then failed"
        assert re.search(rf"rank[s]? [\d, and]*\b{rank.rank}\b[\d, and]*: {re.escape(expected)}", line), (rank, line)
    disagreement = sentence(lines, "^At micro-batch 0 of the run")
    named = re.search(r"^At micro-batch 0 of the run, ranks? ([\d, and]+) all-reduced", disagreement).group(1)
    for r in map(int, re.findall(r"\d+", named)):  # they all-reduced at micro-batch 0: they ran it, and failed
        if run.ranks[r].recorded:
            assert re.search(rf"rank[s]? [\d, and]*\b{r}\b[\d, and]*: 0, then failed during the first", line)


def test_the_epoch_order_sentence_says_what_the_cut_epoch_trained_on(runs):
    """Finding 4: the step limit ended epoch 1 early; the sentence says which of its samples rank 0 trained on."""
    run = runs["three_steps"]
    order = shards(run.options, 0)[0]  # no set_epoch: epoch 1 lists the same order
    loader = torch.utils.data.DataLoader(order, batch_size=2)
    per_epoch = [list(map(int, b)) for b in loader]
    trained = [per_epoch[s % len(per_epoch)] for s in range(3)]  # steps 0 and 1 in epoch 0, step 2 in epoch 1
    epoch_one = trained[len(per_epoch) :]
    assert [i for b in epoch_one for i in b] != order
    line = sentence(lesson.explain(run), "^Without set_epoch")
    listed = ", ".join(map(str, order))
    held = ", ".join(str(i) for b in epoch_one for i in b)
    assert f"rank 0 saw {listed} in epoch 0 and again {listed} in epoch 1" not in line
    assert f"listed {listed} in epoch 0 and again {listed} in epoch 1" in line
    assert f"Rank 0 trained in epoch 1 on {held}: the run stopped at its 3 steps" in line


# --- The Statements, tried on the zoo with plain torch ------------------------------------------------------

TINY_BUCKETS_MB = 0.00002  # about 20 bytes: every parameter of every specimen gets its own bucket


def _zoo_rank(rank: int, world: int, store: str, out: str) -> None:
    """One rank: for each zoo specimen, DDP's wrap, an uneven loop under Join, and overlap timings."""
    import time

    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=20))  # fmt: skip
    found = {}
    for name, specimen in ZOO.items():
        model, batch = specimen.build(seed=rank)  # different weights per rank on purpose
        try:
            wrapped = DistributedDataParallel(model, bucket_cap_mb=TINY_BUCKETS_MB)
        except Exception as error:  # noqa: BLE001  (recorded: DDP refusing a model is a fact to check)
            found[name] = {"wrap_error": type(error).__name__}
            continue
        result = {"after_wrap": [t.tolist() for t in model.state_dict().values()]}
        starts, ready = [], []

        def hook(state, bucket, starts=starts):
            starts.append(time.perf_counter())
            return allreduce_hook(state, bucket)

        wrapped.register_comm_hook(None, hook)
        for p in model.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(lambda _p, ready=ready: ready.append(time.perf_counter()))
        timings = []
        try:
            with Join([wrapped]):
                for _ in range(3 if rank == 0 else 2):  # uneven inputs: rank 1 runs out first
                    starts.clear()
                    ready.clear()
                    specimen.loss(call(wrapped, batch)).backward()
                    timings.append({"starts": list(starts), "last_ready": max(ready, default=None)})
            result["finished"] = True
        except Exception as error:  # noqa: BLE001
            result["error"] = f"{type(error).__name__}: {error}"[:200]
        result["timings"] = timings
        found[name] = result
        dist.barrier()
    pathlib.Path(out, f"rank-{rank}.json").write_text(json.dumps(found))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def zoo_under_ddp(tmp_path_factory):
    import torch.multiprocessing as mp

    folder = tmp_path_factory.mktemp("ddp-zoo")
    mp.start_processes(_zoo_rank, args=(2, str(folder / "store"), str(folder)), nprocs=2, start_method="spawn")
    return [json.loads((folder / f"rank-{r}.json").read_text()) for r in range(2)]


def _trainable(name):
    return any(p.requires_grad for p in ZOO[name].build()[0].parameters())


@falsifies(STATEMENTS["broadcast_at_wrap"])
def test_wrapping_broadcasts_rank_0s_state_on_every_zoo_model(zoo_under_ddp):
    for name in ZOO:
        rank0, _ = ZOO[name].build(seed=0)
        if not _trainable(name):  # the scope: DDP refuses a model with nothing to train
            assert all("wrap_error" in ranks[name] for ranks in zoo_under_ddp), name
            continue
        expected = [t.tolist() for t in rank0.state_dict().values()]
        for ranks in zoo_under_ddp:
            assert ranks[name]["after_wrap"] == expected, name


def _backward_works(name):
    model, batch = ZOO[name].build()
    try:
        ZOO[name].loss(call(model, batch)).backward()
    except RuntimeError:
        return False
    return all(p.grad is not None for p in model.parameters() if p.requires_grad)


@falsifies(STATEMENTS["join_uneven"])
def test_join_lets_every_rank_finish_uneven_inputs_on_the_zoo(zoo_under_ddp):
    in_scope = [name for name in ZOO if _trainable(name) and _backward_works(name)]
    assert "plain_mlp" in in_scope and "tied_weights" in in_scope and "no_grad_inside" not in in_scope
    for name in in_scope:
        for rank, ranks in enumerate(zoo_under_ddp):
            assert ranks[name].get("finished"), (name, rank, ranks[name].get("error"))
            assert len(ranks[name]["timings"]) == (3 if rank == 0 else 2)


@falsifies(STATEMENTS["bucket_overlap"])
def test_with_several_buckets_the_first_all_reduce_starts_before_the_last_gradient(zoo_under_ddp):
    checked = 0
    for name in ZOO:
        if not (_trainable(name) and _backward_works(name)):
            continue
        for rank, ranks in enumerate(zoo_under_ddp):
            for iteration in ranks[name]["timings"][1:2]:  # the second iteration: both ranks still have data
                if len(iteration["starts"]) > 1:
                    assert min(iteration["starts"]) < iteration["last_ready"], (name, rank)
                    checked += 1
                elif iteration["starts"]:  # one bucket: it waits for the last gradient
                    assert iteration["starts"][0] > iteration["last_ready"], (name, rank)
    assert checked >= 10


@falsifies(STATEMENTS["default_timeout"])
def test_default_timeouts_are_30_minutes_for_gloo_and_10_for_nccl():
    from torch.distributed import constants

    assert constants.default_pg_timeout == datetime.timedelta(minutes=30)
    if constants.default_pg_nccl_timeout is not None:  # a build with NCCL
        assert constants.default_pg_nccl_timeout == datetime.timedelta(minutes=10)
    header = pathlib.Path(torch.__file__).parent / "include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp"
    text = " ".join(header.read_text().split())
    assert "kProcessGroupNCCLDefaultTimeout = std::chrono::milliseconds(10 * 60 * 1000)" in text


@falsifies(STATEMENTS["sampler_padding"])
def test_distributed_sampler_pads_by_repeating_the_start_of_its_list():
    for size in range(1, 14):
        for world in range(1, 6):
            for shuffle in (False, True):
                parts = [
                    list(DistributedSampler(range(size), num_replicas=world, rank=r, shuffle=shuffle, seed=3))
                    for r in range(world)
                ]
                listed = [parts[r][k] for k in range(len(parts[0])) for r in range(world)]
                order = torch.randperm(size, generator=torch.Generator().manual_seed(3)).tolist() if shuffle else []
                base = order or list(range(size))
                assert len(listed) % world == 0 and len(listed) - size < world
                assert listed == (base * (len(listed) // size + 1))[: len(listed)], (size, world, shuffle)


@falsifies(STATEMENTS["set_epoch"])
def test_without_set_epoch_a_shuffling_sampler_repeats_its_order():
    for size, world in ((10, 2), (7, 3), (16, 4)):
        sampler = DistributedSampler(range(size), num_replicas=world, rank=0, shuffle=True, seed=1)
        first = list(sampler)
        assert all(list(sampler) == first for _ in range(3))  # no set_epoch: epochs 1, 2, 3 as epoch 0
        sampler.set_epoch(1)
        assert list(sampler) != first or size < 3


def test_the_single_process_sentence_quotes_the_batches_that_ran_and_a_lone_call_is_not_said_to_miss_every_rank():
    """Second audit: with drop_last and accumulation 3 no step combined 3 micro-batches; a call two ranks made
    had no partner, not 'no partner on every rank'."""
    run = ddp.train(world_size=4, per_rank_batch=2, dataset_size=10, drop_last=True, accumulation=3)
    steps = sorted({m.step for r in run.ranks for m in r.micro_steps})
    combined = [sum(len(m.indices) for r in run.ranks for m in r.micro_steps if m.step == s) for s in steps]
    line = lesson.single_process_lines(run)[0]
    assert "× 3 micro-batches" not in line and all(size == 8 for size in combined)
    assert f"({', '.join(map(str, combined))} samples per step)" in line
    stuck = ddp.train(world_size=4, sharding="strided", join=False)
    assert "found no partner on every rank" not in " ".join(ddp.explain(stuck))


# --- Issue 31: the cause of a DDP-versus-one-process gap under accumulation --------------------------


def strided_micro_batches(dataset_size, world_size, per_rank_batch):
    """Strided shards (rank r takes r, r + W, ...), cut into micro-batches of per_rank_batch: the sizes, by rank."""
    shards = [list(range(rank, dataset_size, world_size)) for rank in range(world_size)]
    return {
        rank: [len(shard[i : i + per_rank_batch]) for i in range(0, len(shard), per_rank_batch)]
        for rank, shard in enumerate(shards)
    }


def sample_weights(sizes, world_size):
    """Each sample's weight in the step's gradient: DDP (mean over ranks of each rank's mean of micro-batch means)
    and one process (mean over micro-batches of each combined micro-batch's sample mean)."""
    k = max(len(s) for s in sizes.values())
    ddp_weights = {(rank, j): 1 / (world_size * len(s) * s[j]) for rank, s in sizes.items() for j in range(len(s))}
    combined = [sum(s[j] for s in sizes.values() if j < len(s)) for j in range(k)]
    single = {(rank, j): 1 / (k * combined[j]) for rank, s in sizes.items() for j in range(len(s))}
    return ddp_weights, single


def test_the_gap_under_accumulation_is_named_by_the_micro_batches_that_differ():
    """The audit's setting: 13 samples, 2 ranks, batches of 4, accumulation 2. The ranks' micro-batches are 4+3
    and 4+2: the gap comes from micro-batch 2 (3 against 2), not from the 7-against-6 totals."""
    run = ddp.train(world_size=2, dataset_size=13, per_rank_batch=4, sharding="strided", accumulation=2, epochs=1)
    sizes = strided_micro_batches(13, 2, 4)
    assert sizes == {0: [4, 3], 1: [4, 2]}
    ddp_weights, single = sample_weights(sizes, 2)
    assert ddp_weights[(0, 0)] == single[(0, 0)]  # micro-batch 1: 4 and 4, the same weight either way
    assert ddp_weights[(1, 1)] > single[(1, 1)] > ddp_weights[(0, 1)]  # micro-batch 2: the 2-sample rank weighs more
    line = lesson.single_process_lines(run)[0]
    assert "beyond float tolerance" in line
    assert "micro-batch 2 held 3 samples on rank 0 and 2 samples on rank 1" in line
    assert "micro-batch 1 held" not in line and "7, 6 samples" not in line and "every sample the same" not in line
    assert "a sample in the smaller micro-batch weighed more in DDP's step" in line


def test_equal_shards_cut_into_unequal_micro_batches_are_not_called_the_mean_over_their_samples():
    """14 samples: both ranks 4+3, so DDP equals one process, yet neither step is the 14-sample mean."""
    run = ddp.train(world_size=2, dataset_size=14, per_rank_batch=4, sharding="strided", accumulation=2, epochs=1)
    sizes = strided_micro_batches(14, 2, 4)
    ddp_weights, single = sample_weights(sizes, 2)
    assert ddp_weights == pytest.approx(single)  # equal micro-batches on every rank: the same training
    assert len(set(ddp_weights.values())) > 1  # and not 1/14 for every sample
    assert "the same training, to float tolerance" in lesson.single_process_lines(run)[0]
    line = lesson.effective_batch_line(run)
    assert "a rank's micro-batches held 4 and 3 samples" in line and "not the mean over its samples" in line
    even = ddp.train(world_size=2, dataset_size=16, per_rank_batch=4, sharding="strided", accumulation=2, epochs=1)
    assert "not the mean over its samples" not in lesson.effective_batch_line(even)
