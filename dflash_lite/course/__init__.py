"""Teaching with the notebooks: the student edition, the course site, and grading a class's
submissions in sandboxed kernels (docs/teaching.md). ``python -m dflash_lite.course`` runs
:mod:`~dflash_lite.course.commands`; a chapter imports :func:`chapter_clock` from here."""
from .commands import autograde, chapter_clock, main, student_edition  # noqa: F401 (public)
