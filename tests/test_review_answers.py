"""Every review question of every chapter has a numbered answer in notebooks/solutions/answers/
(the questions are the numbered list under a chapter's "## Review questions" heading)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
ANSWERS = ROOT / "notebooks" / "solutions" / "answers"


def review_questions(chapter: Path) -> list[int]:
    """The numbers of the chapter's review questions, read from its jupytext source."""
    text = chapter.read_text()
    start = text.index("# ## Review questions")
    section = re.split(r"\n# %%|\n# ## ", text[start + 1:], maxsplit=1)[0]
    return [int(n) for n in re.findall(r"^# (\d+)\. ", section, flags=re.M)]


def answers(path: Path) -> list[int]:
    """The numbers of the answers in an answers page (a numbered Markdown list), each non-empty."""
    found = re.findall(r"^(\d+)\. +(\S.*)$", path.read_text(), flags=re.M)
    return [int(n) for n, _ in found]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_review_question_has_an_answer(chapter):
    questions = review_questions(chapter)
    assert questions == list(range(1, len(questions) + 1)) and questions, \
        f"{chapter.name}: review questions not numbered 1..n: {questions}"
    page = ANSWERS / f"{chapter.stem}.md"
    assert page.is_file(), f"no answers for {chapter.name} at {page.relative_to(ROOT)}"
    assert answers(page) == questions, \
        f"{page.name}: answers {answers(page)} do not match the chapter's questions {questions}"


def test_no_answers_page_without_its_chapter():
    stems = {p.stem for p in CHAPTERS}
    orphans = [p.name for p in ANSWERS.glob("*.md") if p.stem not in stems]
    assert not orphans, f"answers for no chapter: {orphans}"
