"""The DDP lab's facts, from real multi-process gloo jobs, and the launcher's promise to leave nothing behind.

Runs are shared per module (each is a real job): `padded`, an even-batched sampler run with
shuffle, no set_epoch, 2-step accumulation and small buckets; `uneven_join` and `uneven_no_join`,
started at the same time from two threads, as two sessions would.
"""

import contextlib
import json
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch
from torch.utils.data import DistributedSampler

from explorers import ddp
from explorers.ddp import analysis, launcher, lesson, processes, schema
from explorers.ddp.settings import COLLECTIVE_TIMEOUT_S
from explorers.engine import Cancelled
from tests.unit.test_layout import ROOT

TOLERANCE = 1e-5  # float32 gradients and parameters over a dozen steps


def helper_pids() -> set[int]:
    """multiprocessing's own long-lived helpers in this process: the forkserver ranks fork from, its tracker."""
    pids = {getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)}
    pids.add(getattr(multiprocessing.resource_tracker._resource_tracker, "_pid", None))
    return {p for p in pids if p}


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is not a live process
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def new_processes(before: set[int]) -> set[int]:
    """Live processes below this one that were not there before, other than multiprocessing's helpers."""
    return {p for p in processes.descendants(os.getpid()) if process_exists(p)} - before - helper_pids()


def assert_nothing_left(run: ddp.DDPRun, before: set[int]) -> None:
    assert not any(process_exists(r.pid) for r in run.ranks), "a rank process outlived its run"
    assert not new_processes(before)
    assert run.port is not None and port_is_free(run.port)


@pytest.fixture(scope="module")
def before() -> set[int]:
    """What ran below this process before the module's runs (in a full session: the run engine's workers)."""
    return set(processes.descendants(os.getpid()))


@pytest.fixture(scope="module")
def padded(before):
    return ddp.train(
        world_size=2,
        per_rank_batch=2,
        dataset_size=9,
        epochs=2,
        steps=12,
        shuffle=True,
        set_epoch=False,
        accumulation=2,
        bucket_cap_mb=0.00005,
        seed=3,
    )


@pytest.fixture(scope="module")
def uneven(before):
    """Two runs at once, from two threads: one with Join, one without, on the same uneven shards."""
    shared = {"sharding": "strided", "world_size": 2, "per_rank_batch": 2, "dataset_size": 9, "epochs": 1}
    found, timings = {}, {}

    def run(join: bool) -> None:
        started = time.monotonic()
        found[join] = ddp.train(**shared, join=join)
        timings[join] = time.monotonic() - started

    threads = [threading.Thread(target=run, args=(join,)) for join in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return found[True], found[False], timings


# --- Gradients: averaged, equal everywhere, and the same training as one process ---------------


def test_after_backward_every_rank_holds_the_mean_of_the_local_gradients(padded):
    for s, (first, second) in enumerate(zip(padded.ranks[0].steps, padded.ranks[1].steps, strict=True)):
        assert first.step == second.step == s
        assert torch.equal(padded.ranks[0].synced_grads[s], padded.ranks[1].synced_grads[s])
        mean = (padded.ranks[0].local_grads[s] + padded.ranks[1].local_grads[s]) / 2
        assert torch.allclose(padded.ranks[0].synced_grads[s], mean, atol=1e-6)
        assert not torch.allclose(padded.ranks[0].local_grads[s], padded.ranks[1].local_grads[s], atol=1e-3)


def test_ddp_matches_one_process_trained_on_the_combined_batches(padded):
    assert padded.outcome == "finished"
    assert padded.single_process_max_diff < TOLERANCE
    assert all(d < TOLERANCE for d in padded.single_process.grad_max_diffs)
    assert len({r.final_param_sum for r in padded.ranks}) == 1  # every replica ends the same


def test_ddp_broadcasts_rank_0s_parameters_when_it_wraps_the_model(padded):
    before = [r.param_sum_before_ddp for r in padded.ranks]
    after = [r.param_sum_after_ddp for r in padded.ranks]
    assert before[0] != before[1] and after == [before[0], before[0]]


def test_accumulation_under_no_sync_communicates_once_per_k_micro_batches(padded):
    for rank in padded.ranks:
        by_step = {}
        for m in rank.micro_steps:
            by_step.setdefault(m.step, []).append(m)
        for step, micros in by_step.items():
            assert [m.synced for m in micros] == [False] * (len(micros) - 1) + [True]
            real = [c for c in rank.collectives if c.step == step and not c.shadow]
            assert len(real) == rank.steps[step].buckets  # one all-reduce call per bucket, only on synced steps
            assert sum(c.bytes for c in real) == 161 * 4  # every gradient, once
        assert rank.steps[0].buckets == 1 and all(s.buckets == 3 for s in rank.steps[1:])  # rebuilt after step 0
        assert max(len(m) for m in by_step.values()) == 2
    comm = analysis.communication(padded)
    assert comm.synced_micro_steps < comm.micro_steps and comm.calls == sum(comm.buckets)


def test_the_notebook_api_hands_out_fresh_tensors(padded):
    padded.ranks[0].local_grads[0].zero_()
    assert padded.ranks[0].local_grads[0].abs().sum() > 0
    assert padded.ranks[1].indices[0] == [i for m in padded.ranks[1].micro_steps if m.step == 0 for i in m.indices]


# --- The sampler --------------------------------------------------------------------------------


def test_distributed_sampler_pads_by_repeating_the_first_indices_of_its_list(padded):
    dataset = range(9)
    for rank in padded.ranks:
        expected = list(DistributedSampler(dataset, num_replicas=2, rank=rank.rank, shuffle=True, seed=3))
        assert list(rank.sampler_orders[0]) == expected
        trained = [i for m in rank.micro_steps if m.epoch == 0 for i in m.indices]
        assert trained == expected  # the DataLoader trained on exactly the sampler's indices
    epoch = analysis.sampler_epochs(padded)[0]
    assert epoch.slots == 10 and epoch.padding == 1 and epoch.repeats_are_the_first
    (repeated,) = epoch.repeats
    assert repeated == epoch.global_order[0] and epoch.repeats[repeated] == (0, 1)


def test_without_set_epoch_every_epoch_has_the_same_order(padded):
    assert analysis.same_order_every_epoch(padded) is True
    for rank in padded.ranks:
        assert rank.sampler_orders[0] == rank.sampler_orders[1]


# --- Uneven inputs, Join, the short timeout, and two runs at once -------------------------------


def test_with_join_every_rank_finishes_uneven_inputs(uneven):
    joined, _, _ = uneven
    assert joined.outcome == "finished" and all(r.outcome == "finished" for r in joined.ranks)
    assert analysis.batches_per_epoch(joined) == [(3, 2)]
    assert analysis.shadowed(joined.ranks[1]) >= 1 and analysis.shadowed(joined.ranks[0]) == 0
    assert len({r.final_param_sum for r in joined.ranks}) == 1  # Join's end synchronised the replicas


def test_without_join_a_rank_waits_for_a_partner_and_fails_at_the_short_timeout(uneven):
    _, stuck, timings = uneven
    assert stuck.outcome == "failed" and stuck.single_process is None
    assert any("Timed out" in (r.error or "") for r in stuck.ranks)
    last_training = max(m.backward[1] for r in stuck.ranks for m in r.micro_steps)
    ended = max(r.finished_at for r in stuck.ranks)
    assert COLLECTIVE_TIMEOUT_S - 0.5 < ended - last_training < COLLECTIVE_TIMEOUT_S + 5
    assert timings[False] < 60


def test_no_process_is_left_and_the_ports_are_free_after_finished_and_failed_runs(padded, uneven, before):
    for run in (padded, *uneven[:2]):
        assert_nothing_left(run, before)


def test_two_runs_at_once_get_their_own_ports_and_results(uneven):
    joined, stuck, _ = uneven
    assert joined.port != stuck.port
    assert joined.options.join and not stuck.options.join
    assert {r.pid for r in joined.ranks}.isdisjoint(r.pid for r in stuck.ranks)


def test_a_cancelled_run_leaves_no_process_and_frees_its_port(monkeypatch):
    before = set(processes.descendants(os.getpid()))
    launches = []
    original = launcher.start

    def remember(options, report=None):
        launches.append(original(options, report))
        return launches[-1]

    def cancel(done, total):  # as a page left mid-run: once some rank is up and has joined the rendezvous
        if done > 0:
            raise Cancelled

    monkeypatch.setattr(launcher, "start", remember)
    with pytest.raises(Cancelled):
        ddp.run_ddp(ddp.DDPOptions(), report=cancel)
    (launch,) = launches
    assert all(not p.alive() for p in launch.processes) and not new_processes(before)
    assert port_is_free(launch.port) and not launch.directory.exists()


COLD_CANCEL = """
import pathlib, tempfile, time
from explorers.ddp import launcher
from explorers.ddp.options import DDPOptions

class Leave(Exception):
    pass

started, reports = time.monotonic(), []

def report(done, total):
    reports.append(done)
    if time.monotonic() - started > 0.5:
        raise Leave

try:
    launcher.run(DDPOptions(), report)
except Leave:
    left = sorted(p.name for p in pathlib.Path(tempfile.gettempdir()).iterdir() if p.name.startswith("ddp-lab-"))
    print(round(time.monotonic() - started, 2), len(reports), left)
"""


def test_a_cancel_while_a_cold_forkserver_imports_is_polite_and_cleans_up(tmp_path):
    """In a new process the forkserver's first start imports torch and DDP's modules (seconds): progress is
    reported meanwhile, so leaving takes effect at once, with cleanup, instead of waiting for the imports."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", COLD_CANCEL], cwd=ROOT, env=env, capture_output=True, text=True)
    seconds, reports, left = done.stdout.split(maxsplit=2)
    assert float(seconds) < 1.5 and int(reports) > 3, done.stdout + done.stderr[-2000:]
    assert left.strip() == "[]"


def test_the_hard_limit_kills_every_rank_and_says_so():
    before = set(processes.descendants(os.getpid()))
    options = ddp.DDPOptions(sharding="strided", dataset_size=9, per_rank_batch=2, join=False, epochs=1)
    started = time.monotonic()
    raw = launcher.run(options, timeout_s=1.0)  # the stuck rank would wait 3 s: the limit comes first
    assert time.monotonic() - started < 1.0 + 6  # killing and reaping take a moment, not a timeout's worth
    run = schema.from_raw(raw, "test")
    assert run.outcome == "timed_out" and "limit" in run.note
    assert_nothing_left(run, before)


# --- Options and the results file ---------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"world_size": 5},
        {"world_size": 0},
        {"per_rank_batch": 17},
        {"dataset_size": 3},
        {"steps": 13},
        {"epochs": 4},
        {"accumulation": 5},
        {"bucket_cap_mb": 1.0},
        {"shuffle": 1},
        {"sharding": "random"},
        {"launcher": "mpirun"},
        {"device": "tpu"},
        {"seed": -1},
        {"world_size": True},
    ],
)
def test_options_are_bounded(change):
    with pytest.raises(ValueError, match=next(iter(change))):
        ddp.DDPOptions(**change)


def test_the_runs_own_file_passes_the_strict_reader_and_reads_back_the_same(padded):
    again = ddp.parse(padded.results_json, "again.json")
    assert again.ranks == padded.ranks and again.options == padded.options
    assert again.single_process == padded.single_process


def mutated(run: ddp.DDPRun, change) -> str:
    data = json.loads(run.results_json)
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format="something else"), "format"),
        (lambda d: d.update(extra=1), "unknown key"),
        (lambda d: d.pop("ranks"), "missing key"),
        (lambda d: d["ranks"][0]["steps"][0]["local_grad"].pop(), r"ranks\[0\]\.steps\[0\]\.local_grad: expected 161"),
        (lambda d: d["ranks"][1]["micro_steps"][0]["indices"].__setitem__(0, 99), r"indices\[0\]: expected an integer"),
        (lambda d: d["ranks"][0].update(host="![x](http://example.com/a.png)"), r"ranks\[0\]\.host"),
        (lambda d: d["ranks"][0].update(error="bad\x00text"), r"ranks\[0\]\.error"),
        (lambda d: d["options"].update(world_size=3), "world_size"),
        (lambda d: d.update(world_size=1000), "world_size"),
        (lambda d: d["ranks"].reverse(), "one record per rank"),
        (lambda d: d["launch"].update(method="rm -rf /"), "launch.method"),
        (lambda d: d["parameters"][0].update(numel=7), "the lab's model"),
        (lambda d: d["single_process"].update(max_param_diff="0"), "max_param_diff"),
    ],
)
def test_a_malformed_file_is_refused_with_the_place_it_went_wrong(padded, change, message):
    with pytest.raises(schema.ResultsFileError, match=message):
        ddp.parse(mutated(padded, change), "bad.json")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe not utf-8", "not a JSON"),
        (b"{not json", "not a JSON"),
        (b'{"version": NaN}', "not a JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not a JSON"),
        (b'{"x": ' + b"9" * 5000 + b"}", "not a JSON"),
        (b"[]", "expected an object"),
        (b" " * (schema.MAX_FILE_BYTES + 1), "at most"),
    ],
)
def test_what_is_not_a_results_file_at_all_gets_a_clear_error(data, message):
    with pytest.raises(schema.ResultsFileError, match=message):
        ddp.parse(data, "bad.json")


def test_a_sample_written_by_torchrun_on_two_nodes_loads(tmp_path):
    sample = ddp.load_results("assets/ddp/torchrun-2-nodes.json")
    assert sample.launcher == "torchrun" and sample.nodes == 2 and sample.world_size == 4
    assert sample.outcome == "finished" and sample.single_process_max_diff < TOLERANCE
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (schema.MAX_FILE_BYTES + 1))
    with pytest.raises(schema.ResultsFileError, match="at most"):
        ddp.load_results(big)


def test_planned_micro_steps_match_what_the_ranks_did(padded, uneven):
    for run in (padded, uneven[0]):
        for rank in run.ranks:
            assert launcher.planned_micro_steps(run.options, rank.rank) == len(rank.micro_steps)
    assert analysis.samples_per_step(padded) == [8, 2, 8, 2]  # 2 per rank x 2 ranks x 2, then one short batch


@pytest.mark.parametrize("note", ["**Timed out** by [the launcher](http://example.com)", ""])
def test_a_timed_out_file_whose_ranks_all_finished_gets_a_banner_that_says_so(padded, note):
    """Third audit: a file saying timed_out, every rank finished, and a note with markup showed
    "**Timed out**: . See *Why* below."; the banner now says what the records hold, the note only as plain text."""

    def change(data):
        data.update(outcome="timed_out", note=note or None)

    run = ddp.parse(mutated(padded, change), "odd.json")
    finished, text = lesson.banner(run, "on this machine")
    assert not finished and ": ." not in text and "every rank's own record ends finished" in text
    assert ("under *Why*" in text) == bool(note) and "example.com" not in text
    why = " ".join(lesson.uneven_lines(run))
    assert ("`**Timed out** by [the launcher](http://example.com)`" in why) == bool(note)  # a code span: not rendered
