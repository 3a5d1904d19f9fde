"""Where the repository's checkout is (:data:`ROOT`, the folder above this package): the one place
the package looks outside itself, for the course commands, the grader and the figures."""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
NOTEBOOKS = ROOT / "notebooks"


def in_checkout() -> bool:
    """Whether the package runs from a checkout, beside its notebooks and docs (not a wheel)."""
    return NOTEBOOKS.is_dir() and (ROOT / "docs").is_dir() and (ROOT / "pyproject.toml").is_file()


def chapters(selection: list[str] | None = None) -> list[Path]:
    """The chapter notebooks, all or those whose names start with one of ``selection`` ("02")."""
    return [nb for nb in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
            if not selection or nb.name.startswith(tuple(selection))]
