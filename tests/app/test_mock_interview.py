"""The mock interview: three questions from three labs, a challenge each, a self-score, and the weakest on Day 7."""

from tests.app.conftest import open_page
from ui import mock, plan
from ui.catalogue import LABS


def questions(at) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("**Question ")]


def test_a_set_is_three_questions_from_three_labs_each_with_its_lab_a_challenge_and_the_rubric():
    at = open_page(mock.PAGE)
    assert not at.exception
    asked = questions(at)
    assert len(asked) == 3
    by_question = {lab.question: lab for lab in LABS if lab.page}
    labs = [by_question[q.split(". ", 1)[1].rstrip("*")] for q in asked]
    assert len({lab.slug for lab in labs}) == 3
    challenges = [m.value for m in at.markdown if m.value.startswith("**The interviewer:**")]
    assert len(set(challenges)) == 3 and all(any(c in m for m in challenges) for c in mock.CHALLENGES)
    assert len(at.checkbox) == 3 * len(mock.RUBRIC)
    assert "in memory" in " ".join(c.value for c in at.caption)  # it says where the scores are kept


def test_new_set_draws_again_and_a_saved_score_reaches_day_7_weakest_first():
    at = open_page(mock.PAGE)
    first = questions(at)
    for _ in range(5):  # three of nine labs: a new set differs from the first within a few draws
        at.button[0].click().run()
        if questions(at) != first:
            break
    assert questions(at) != first
    slugs = [key.removeprefix("mock-save-") for key in (b.key for b in at.button) if key and key.startswith("mock-")]
    for ticks, slug in zip((4, 1), slugs, strict=False):
        for i in range(ticks):
            at.checkbox(key=f"mock-{slug}-{i}").check().run()
        at.button(key=f"mock-save-{slug}").click().run()
    assert not at.exception
    assert any("Saved: 1 of 5" in c.value for c in at.caption) and any("Saved: 4 of 5" in c.value for c in at.caption)
    at.switch_page(plan.PAGE).run()
    weakest = [m.value for m in at.markdown if m.value.startswith("- 1 of 5")]
    listed = [m.value for m in at.markdown if "of 5:" in m.value]
    assert weakest and listed[0].index("1 of 5") < listed[0].index("4 of 5")
