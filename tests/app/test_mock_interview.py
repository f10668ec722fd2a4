"""The mock interview: three questions from three labs, a challenge each, a self-score, and the weakest on Day 7."""

from tests.app.conftest import open_page
from ui import challenges as ui_challenges
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
    assert len(set(challenges)) == 3
    for lab, shown in zip(labs, challenges, strict=True):  # each challenge is its own lab's, one kind per question
        assert any(text in shown for text in ui_challenges.BY_LAB[lab.slug].values()), (lab.slug, shown)
    kinds = [
        next(k for k, t in ui_challenges.BY_LAB[lab.slug].items() if t in shown)
        for lab, shown in zip(labs, challenges, strict=True)
    ]
    assert sorted(kinds) == sorted(ui_challenges.KINDS)
    assert len(at.checkbox) == 3 * len(mock.RUBRIC)
    assert "saved in SQLite" in " ".join(c.value for c in at.caption)  # it says where the scores are kept


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
    listed = [link.proto.label for link in at.get("page_link") if link.proto.label.startswith("Mock interview, ")]
    assert [label.split(":")[0] for label in listed] == ["Mock interview, 1 of 5", "Mock interview, 4 of 5"]


def test_every_lab_on_the_menu_has_a_challenge_of_every_kind_that_names_its_own_subject():
    """The third audit: "the dependency you rely on times out" was drawn after the Gradients question. Each lab's
    challenges are its own now, one per kind, and no two labs share one."""
    built = {lab.slug for lab in LABS if lab.page}
    assert built <= set(ui_challenges.BY_LAB)
    texts = [text for slug in built for text in ui_challenges.BY_LAB[slug].values()]
    assert len(texts) == len(set(texts)) == 3 * len(built)
    assert all(set(ui_challenges.BY_LAB[slug]) == set(ui_challenges.KINDS) for slug in built)
    for seed in range(60):
        for asked in mock.draw(seed):
            assert asked.challenge in ui_challenges.BY_LAB[asked.lab.slug].values()


def test_a_question_that_continues_one_of_the_guides_is_said_to_and_never_numbered_against_the_set():
    """The newcomer's finding: the mock interview read "Question 3. Question 6, continued: ..."."""
    for seed in range(40):  # the draw that holds a follow-up lab
        asked = mock.draw(seed)
        if any(a.lab.extends for a in asked):
            break
    at = open_page(mock.PAGE)
    at.session_state[mock.SEED_KEY] = seed
    at.run()
    shown = questions(at)
    assert not any("continued" in q for q in shown)
    follow_up = next(a.lab for a in asked if a.lab.extends)
    assert follow_up.follows in [c.value for c in at.caption]
    assert f"question {follow_up.extends}:" in follow_up.follows


def test_a_bad_link_to_a_page_without_controls_gets_a_notice_and_a_clean_address():
    """The class-server probe: the Mock interview dropped the link's problems without a word."""
    for page in (mock.PAGE, plan.PAGE, "app.py"):
        at = open_page(page, {"drill": "<b>x</b>", "present": "maybe"})
        notices = " ".join(w.value for w in at.warning)
        assert not at.exception and "present" in notices and "Ignored unknown link settings" in notices, page
        assert dict(at.query_params) == {}, page  # the bad values are gone from the address bar
    clean = open_page(mock.PAGE)
    assert not clean.warning


def test_a_set_draws_a_tensor_transformation_beside_the_loop_drill_linked_at_its_seed_and_its_miss_reaches_day_7():
    from explorers.tensors.catalogue import PUZZLES
    from ui import puzzles

    at = open_page(mock.PAGE)
    name, seed = mock.tensor_question(at.session_state[mock.SEED_KEY])
    assert PUZZLES[name].level >= 2
    links = [link.proto for link in at.get("page_link") if link.proto.label.startswith("Tensor drills: ")]
    assert [link.query_string for link in links] == [f"puzzle={name}&seed={seed}"]
    assert any(mock.TENSOR_QUESTION in m.value for m in at.markdown)
    assert any(link.proto.label.startswith("Fix the loop: ") for link in at.get("page_link"))  # beside it
    at.switch_page(puzzles.PAGE)
    at.query_params.update({"puzzle": name, "seed": str(seed), "answer": "torch.zeros(1)"})
    at.run()
    at.button(key="check").click().run()
    assert at.error and not at.exception
    at.switch_page(plan.PAGE).run()
    weak = [link.proto for link in at.get("page_link") if link.proto.label.startswith("Tensor drills, ")]
    assert [w.query_string for w in weak] == [f"puzzle={name}&seed={seed}"]
    assert "first: wrong shape" in weak[0].label and "not solved yet" in weak[0].label
