"""The GPU evidence reading as a notebook uses it, and the rules that keep its questions fair."""

from __future__ import annotations

import pytest

from explorers import evidence
from explorers.evidence import lesson, questions
from explorers.evidence.cpu import CpuReading
from explorers.evidence.reading import Reading
from explorers.evidence.shipped import FOLDER, NO_GPU_WORK, SHIPPED

GIVEAWAYS = ("idle", "host", "bound", "sync", "wait", "overlap", "hidden", "exposed", "toy", "small", "slow")


def test_the_notebook_reads_a_key_a_path_and_bytes_alike():
    by_key = evidence.read("one-step")
    assert evidence.read(SHIPPED["one-step"].path) == by_key == evidence.read(SHIPPED["one-step"].path.read_bytes())
    assert set(evidence.catalogue()) == set(SHIPPED)
    assert all("MIT" in line for line in evidence.catalogue().values())


@pytest.mark.parametrize("file", NO_GPU_WORK)
def test_a_shipped_file_without_gpu_work_reads_as_its_cpu_side(file):
    assert isinstance(evidence.read(FOLDER / file), CpuReading)


@pytest.mark.parametrize("key", SHIPPED)
def test_each_timeline_shows_cpu_and_gpu_rows_inside_its_window(key):
    reading = evidence.read(key)
    assert isinstance(reading, Reading)
    rows = {span.row for span in reading.timeline}
    assert any(row.startswith("GPU stream") for row in rows) and any(row.startswith("Thread") for row in rows)
    assert all(
        span.start_us >= 0 and span.start_us + span.dur_us <= reading.timeline_us + 1e-6 for span in reading.timeline
    )


@pytest.mark.parametrize("key", SHIPPED)
def test_no_title_key_or_shown_source_names_what_the_trace_shows(key):
    shown = " ".join((SHIPPED[key].title, key, SHIPPED[key].source)).lower()
    assert not any(word in shown for word in GIVEAWAYS), shown


@pytest.mark.parametrize("key", SHIPPED)
def test_choices_come_in_a_fixed_order_that_does_not_follow_the_answer(key):
    for question in questions.questions(evidence.read(key)):
        if question.key == "bound":
            assert question.evidence == tuple(questions.SPLIT.values())
            assert question.causes == tuple(questions.BOUND_CAUSES.values())
        if question.key == "sync":
            assert len(question.evidence) >= questions.MIN_SYNC_CHOICES
            assert [label.split(".")[0] for label in question.evidence] == sorted(
                (label.split(".")[0] for label in question.evidence), key=int
            )  # in time order, as the table lists them
            assert list(question.causes) == sorted(question.causes)
        assert len(question.causes) >= 2 and question.right_cause in question.causes
        assert question.right_evidence in question.evidence


def test_a_grade_checks_the_evidence_and_the_answer_apart():
    question = questions.questions(evidence.read("alexnet"))[0]
    wrong = next(e for e in question.evidence if e != question.right_evidence)
    assert questions.grade(question, question.right_evidence, question.right_cause).right
    assert not questions.grade(question, wrong, question.right_cause).right
    assert questions.grade(question, wrong, question.right_cause).cause_right
    assert not questions.grade(question, None, None).right


def test_a_one_time_gap_is_answered_with_a_steady_state_step_and_a_pre_ampere_card_with_fp16():
    _, remedy, (page, _) = lesson.verdict(evidence.read("alexnet"))
    assert "steady-state step" in remedy and "schedule(" in remedy and page.endswith("3_Profiler.py")
    _, remedy, _ = lesson.verdict(evidence.read("train-v100"))
    assert "fp16 autocast with a GradScaler" in remedy and "compute capability 7" in remedy
    _, remedy, _ = lesson.verdict(evidence.read("embeddings-8"))
    assert "bf16" in remedy


def test_kernel_names_are_shortened_and_copies_kept_whole():
    assert lesson.short("void at::native::reduce_kernel<512, 1, at::native::R<float>>(at::native::R<float>)") == (
        "at::native::reduce_kernel<512, 1, at::…>"
    )
    assert lesson.short("at::cuda::(anonymous namespace)::spin_kernel(long)") == "at::cuda::spin_kernel"
    assert lesson.short("Memcpy HtoD (Pageable -> Device)", 40) == "Memcpy HtoD (Pageable -> Device)"
