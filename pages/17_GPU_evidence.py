"""GPU evidence: real A100/V100/MI250 traces read with HolisticTraceAnalysis, questions graded, your own trace read."""

import hashlib

import streamlit as st

from explorers import uploads
from explorers.evidence import card, lesson, loading, questions
from explorers.evidence import figures as charts
from explorers.evidence.cpu import CpuReading
from explorers.evidence.experiment import ShippedOptions, UploadOptions, read_shipped, read_upload
from explorers.evidence.reading import Reading
from explorers.evidence.shipped import DEFAULT, SHIPPED
from explorers.units import format_bytes
from ui import evidence_practice, figures, runs
from ui.fields import ChoiceField
from ui.frame import start_lab

# The link holds the trace; never a pick or an answer.
FIELDS = (ChoiceField("trace", DEFAULT, tuple(SHIPPED), label="Trace", format=lambda k: SHIPPED[k].title),)
READ_LIMIT_S = 60

page = start_lab("evidence", FIELDS)
bench, stage = page.workbench()
with bench, page.controls():
    held = st.session_state.get(page.key("upload")) is not None  # a file read in its place: the choice waits
    page.widget("trace", disabled=held, help=lesson.TRACE_HELD if held else None)
    upload = st.file_uploader(
        f"Or read your own trace (.json or .json.gz, up to {format_bytes(loading.MAX_FILE_BYTES)})",
        type=["json", "gz"],
        key=page.key("upload"),
        max_upload_size=uploads.upload_megabytes(loading.MAX_FILE_BYTES),
        help=lesson.UPLOAD_HELP,
    )
    st.caption(lesson.UPLOAD_PRIVACY)

shipped = SHIPPED[page.value("trace")]
reading = refusal = None
if upload is not None:
    name = uploads.code(upload.name)
    if upload.size > loading.MAX_FILE_BYTES:
        refusal = f"it is {format_bytes(upload.size)}, over {format_bytes(loading.MAX_FILE_BYTES)}"
    else:
        data = upload.getvalue()
        answer = runs.run(
            read_upload, UploadOptions(data, hashlib.sha256(data).hexdigest()), label=f"Reading {upload.name[:40]}",
            timeout_s=READ_LIMIT_S, long=True,
        )  # fmt: skip
        reading, refusal = (None, answer) if isinstance(answer, str) else (answer, None)
own = reading is not None  # the upload's reading; otherwise the chosen trace's (a refused upload is said above it)
if own:
    title, source, settings = f"Your trace {name}", f"your upload {name}", {"file": name}
else:
    reading = runs.run(read_shipped, ShippedOptions(shipped.key), label="Reading the trace", timeout_s=READ_LIMIT_S)
    title, source, settings = shipped.title, shipped.source, {"trace": shipped.key}
page.sync_url()


def show(reading: Reading) -> None:
    figures.plotly(
        charts.split_figure(reading, "Where the GPU's time went"),
        lesson.figure_caption("Time split and idle split (HTA)", reading, settings),
        "evidence-split",
    )
    figures.plotly(
        charts.timeline_figure(reading, f"Timeline: {reading.timeline_title}"),
        lesson.figure_caption(lesson.timeline_what(reading), reading, settings),
        "evidence-timeline",
    )
    st.caption(lesson.card_line(reading, source))


with stage:
    if refusal is not None:
        st.error(lesson.not_read(name, refusal, shipped.title), icon=":material/error:")
    if isinstance(reading, CpuReading):
        st.warning(lesson.cpu_lines(reading)[0], icon=":material/info:")
        figures.plotly(
            charts.labels_figure(reading.labels, "The record_function labels"),
            " · ".join(
                ["record_function labels, ms per step · no GPU events", *(f"{k} {v}" for k, v in settings.items())]
            ),
            "evidence-labels",
        )
        st.markdown("\n".join(f"- {line}" for line in lesson.cpu_lines(reading)[1:]))
    else:
        show(reading)

if isinstance(reading, Reading):
    said, remedy, (lab_page, lab_words) = lesson.verdict(reading)
    st.subheader(lesson.READING_TITLE)  # the evidence first: the questions below point into it
    st.markdown("\n".join(f"- {line}" for line in lesson.reading_lines(reading)))
    if reading.blocking:
        st.caption(lesson.blocking_caption(reading))
        figures.table(lesson.blocking_rows(reading))
    figures.table(lesson.kernel_rows(reading))
    figures.table(lesson.activity_rows(reading))
    st.subheader(lesson.QUESTIONS_TITLE)
    if own:
        st.caption(lesson.NOT_SCORED)
    for question in questions.questions(reading):
        evidence_practice.ask(question, None if own else shipped.key, page.presenting)
    figures.why_panel([s.text for s in lesson.STATEMENTS.values()])
    # The verdict and the card answer the questions: on a shipped trace they wait for every answer to be checked
    if own or evidence_practice.answered_all(reading, shipped.key):
        st.subheader(lesson.VERDICT_TITLE)
        st.markdown(f"{said} {remedy}")
        st.page_link(lab_page, label=lab_words, icon=":material/arrow_forward:")
        figures.answer_card(card.answer_card(reading))

figures.notes_download(
    "GPU evidence",
    " · ".join(f"GPU evidence · {k} {v}" for k, v in settings.items()),
    {
        "The trace": lesson.notes_trace(reading, source),
        "Reading": "\n".join(f"- {line}" for line in lesson.notes_lines(reading)),
        "Your answers so far": "\n".join(f"- {s}" for s in evidence_practice.scores()) or "–",
    },
    "gpu-evidence",
)
