"""Teaching with the notebooks: each chapter's header (hardware and run time), student editions
in nbgrader's layout, and autograding in a sandboxed kernel.

``python -m dflash_lite.course student-edition | autograde | site``: docs/teaching.md."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..checkout import NOTEBOOKS, ROOT, chapters, in_checkout  # noqa: F401 (public)
from ..files import atomic_write_text
from ..measuring.harness import cpu_name
from ..outputs import guard_output_dir, guard_output_file
from ..validate import POS, Parser
from . import grader, grading
from . import site as course_site
from .blanks import BEGIN, END, _is_stub, blank, stub, student_markdown  # noqa: F401 (public)

ASSIGNMENT = "dflash_lite"          # the nbgrader assignment that holds every chapter


def hardware() -> str:
    """The device the notebooks run on: the GPU's name, or the CPU's model and torch's threads."""
    import torch

    if torch.cuda.is_available():
        return f"GPU {torch.cuda.get_device_name(0)}"
    return f"CPU {cpu_name()}, {torch.get_num_threads()} threads"


@dataclass
class ChapterClock:
    """A chapter's timer: its first code cell starts it, its last prints the run time."""
    started: float = field(default_factory=time.perf_counter)
    device: str = field(default_factory=hardware)

    def report(self) -> None:
        minutes, rest = divmod(round(time.perf_counter() - self.started), 60)
        print(f"this chapter ran in {minutes} min {rest:02d} s on {self.device}")


def chapter_clock() -> ChapterClock:
    """Start timing a chapter and print the hardware it runs on."""
    clock = ChapterClock()
    print(f"running on {clock.device}; the last cell prints how long the chapter took")
    return clock


def prepare_course(course_root: Path, notebooks: list[Path]) -> None:
    """nbgrader's student edition of ``notebooks``, in ``course_root/release/`` (nbgrader's API over
    the course directory ``course_root``, its gradebook an SQLite file inside it)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    source = course_root / "source" / ASSIGNMENT
    source.mkdir(parents=True, exist_ok=True)
    for nb in notebooks:
        shutil.copy(nb, source / nb.name)
    bin_dir = str(Path(sys.executable).parent)                   # nbgrader runs `alembic` from PATH
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    config = Config()
    config.CourseDirectory.root = str(course_root)
    config.CourseDirectory.db_url = f"sqlite:///{course_root / 'gradebook.db'}"
    config.Execute.timeout = 1800
    config.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
    api = NbGraderAPI(CourseDirectory(config=config), config=config)
    result = api.generate_assignment(ASSIGNMENT)
    if not result.get("success"):
        raise RuntimeError(f"nbgrader generate_assignment failed:\n{result.get('log', '')}\n"
                           f"{result.get('error', '')}")


EDITION_MARK = ".dflash-student-edition"    # lists what student-edition wrote into a folder


def _check_edition_dir(out: Path) -> None:
    """Refuse a folder holding what student-edition did not write (notebooks, a student's work)."""
    guard_output_dir(out, "the student edition's folder")
    if grading._inside(out, ROOT):
        raise ValueError(f"{out} is inside the repository: write the student edition outside it")
    if not out.exists() or not any(out.iterdir()):
        return
    mark = out / EDITION_MARK
    if not mark.is_file():
        raise ValueError(f"{out} is not empty and was not written by student-edition: "
                         "give a new folder")
    ours = _edition_files(mark)
    if foreign := [p.name for p in out.iterdir() if p.name not in {*ours, EDITION_MARK}]:
        raise ValueError(f"{out} holds {foreign[0]}, which student-edition did not write: "
                         "give a new folder")
    # a notebook changed since it was written is a student's work
    if changed := [name for name, digest in ours.items() if digest and (out / name).is_file()
                   and _sha256(out / name) != digest]:
        raise ValueError(f"{out / changed[0]} changed since student-edition wrote it (a "
                         "student's work?): give a new folder")


def _edition_files(mark: Path) -> dict[str, str | None]:
    """What the marker lists: each file or folder student-edition wrote, with the sha256 of a
    notebook as written (None for the rest, replaced whole; and in a marker from before hashes)."""
    return {name: digest or None for name, _, digest in
            (line.partition(" ") for line in mark.read_text().splitlines() if line)}


def _write_edition_files(mark: Path, files: dict[str, str | None]) -> None:
    mark.write_text("".join(f"{name} {digest or ''}".rstrip() + "\n"
                            for name, digest in sorted(files.items())))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


BUNDLE = ("dflash_lite", "results", "pyproject.toml", "requirements.txt")


def student_edition(out_dir: str | Path, selection: list[str] | None = None) -> list[Path]:
    """Write the student bundle into ``out_dir`` (docs/teaching.md#what-students-get) and return
    the notebooks' paths. Refuses a folder that holds anything it did not write itself."""
    out = Path(out_dir).resolve()
    notebooks = chapters(selection)
    _check_edition_dir(out)
    with tempfile.TemporaryDirectory() as tmp:
        prepare_course(Path(tmp), notebooks)
        out.mkdir(parents=True, exist_ok=True)
        mark = out / EDITION_MARK
        ours = _edition_files(mark) if mark.is_file() else {}
        ours.update(dict.fromkeys([*BUNDLE, "STUDENTS.md"]))
        for nb in notebooks:
            released = nbformat.read(Path(tmp) / "release" / ASSIGNMENT / nb.name, as_version=4)
            source = nbformat.read(nb, as_version=4)
            for cell, original in zip(released.cells, source.cells):
                if cell.metadata.get("nbgrader", {}).get("solution"):
                    cell.source = blank(original.source)
                elif cell.cell_type == "markdown":
                    cell.source = student_markdown(cell.source)
            # listed before it is written: a run stopped in between leaves no foreign file
            ours[nb.name] = None
            _write_edition_files(mark, ours)
            nbformat.write(released, out / nb.name)
            ours[nb.name] = _sha256(out / nb.name)
        _write_edition_files(mark, ours)
        for name in BUNDLE:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, target,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(ROOT / name, target)
        (out / "STUDENTS.md").write_text(STUDENTS_MD)
    return [out / nb.name for nb in notebooks]


STUDENTS_MD = """# dflash-lite, student edition

The notebooks here are the course's chapters with the exercises left blank. Install the package
beside them (it holds the self-checks, not the answers), then open the notebooks:

    python -m venv .venv && . .venv/bin/activate
    pip install -r requirements.txt && pip install -e .
    jupyter lab

Each exercise cell says what to write (a name, a type, a shape); the cell under it checks your
answer and shows the points. A blank fails only its own cell and its check: a demonstration that
builds on something you have not written yet uses the package's version and says so. The points that
count are computed by your teacher's grader, from your answers, not from what your notebook prints.
"""


FEEDBACK_KEY = "dflash_lite_feedback"     # a feedback notebook's metadata: what it scored


def is_feedback(path: Path) -> bool:
    """Whether ``path`` is a notebook :func:`autograde` wrote as feedback."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return isinstance(data, dict) and FEEDBACK_KEY in (data.get("metadata") or {})


def autograde(submitted_dir: str | Path, selection: list[str] | None = None,
              course_root: str | Path | None = None, allow_root: bool = False,
              hidden: str | Path | None = None, limits: grading.Limits | None = None,
              feedback: str | Path | None = None, overwrite: bool = False) -> dict:
    """Autograde the notebooks a student filled in (``NN_name.ipynb`` in ``submitted_dir``) one at a
    time, each sandboxed under ``limits`` (:mod:`dflash_lite.course.grading`); ``course_root`` keeps
    the working files (else a temporary folder, removed). ``feedback``: a folder to write each
    graded notebook into, for the student (its outputs, each check's included; its score in the
    metadata); a chapter notebook already there that is not such feedback is replaced only with
    ``overwrite``. Returns ``{notebook: {"score",
    "max_score", "cells": {grade_id: [score, max_score]}, "messages": {grade_id: why it scored 0},
    "stopped": why it stopped early or "", "kernel_score": what its kernel's outputs claimed,
    "submission": the folder graded}}``; a chapter of ``selection`` absent scores 0, "missing"."""
    submitted = Path(submitted_dir)
    if grading._inside(submitted, ROOT):
        raise ValueError(f"{submitted} is inside the repository: grade submissions from a folder "
                         "outside it (their code runs while grading)")
    if hasattr(os, "geteuid") and os.geteuid() == 0 and not allow_root:
        raise PermissionError("refusing to grade as root: students' code runs while grading "
                              "(use an unprivileged user or a container, or pass --allow-root)")
    names = {p.name for p in submitted.glob("*.ipynb")}
    asked = chapters(selection)
    notebooks = [nb for nb in asked if nb.name in names]
    # a chapter asked for by number and not returned scores 0 and says so
    missing = [nb for nb in asked if nb.name not in names] if selection else []
    if not notebooks and not missing:
        raise ValueError(f"no chapter notebooks (NN_name.ipynb) in {submitted}")
    for name in sorted(names - {nb.name for nb in chapters()}):
        print(f"autograde: ignoring {name!r} in {submitted}: not a chapter notebook's name "
              "(NN_name.ipynb, as the student edition names it)", file=sys.stderr)
    hidden = Path(hidden) if hidden else grader.HIDDEN
    if not hidden.is_file():
        raise ValueError(f"the hidden checks are missing: no {hidden}")
    if feedback is not None:
        feedback = guard_output_dir(feedback, "feedback folder", tuple(nb.name for nb in notebooks),
                                    overwrite, is_feedback)
        if grading._inside(feedback, submitted) or grading._inside(feedback, ROOT):
            raise ValueError(f"feedback folder {str(feedback)!r} is inside the submission or the "
                             "repository: write the feedback to a folder of its own")
    limits = limits or grading.Limits()
    report = {}
    with tempfile.TemporaryDirectory(prefix="dflash-grade-") as tmp:
        work = Path(course_root).resolve() if course_root else Path(tmp)
        outputs_dir = work / "outputs"
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {"PYTHONPATH": path,
               "DFLASH_LITE_FIGURES": str(outputs_dir / "figures"),
               "DFLASH_LITE_RESULTS": str(outputs_dir / "results"),
               "DFLASH_LITE_CACHE": str(outputs_dir / "cache"),
               "IPYTHONDIR": str(outputs_dir / "ipython"), "MPLCONFIGDIR": str(outputs_dir / "mpl"),
               "MPLBACKEND": "Agg", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        for nb in notebooks:
            outputs_dir.mkdir(parents=True, exist_ok=True)
            run = grading.run_submission(nb, submitted / nb.name, work, hidden, limits, env)
            report[nb.stem] = entry = _entry(run, submitted)
            if feedback is not None and run["graded"] is not None:
                graded = run["graded"]
                graded.metadata[FEEDBACK_KEY] = {k: entry[k] for k in ("score", "max_score")}
                feedback.mkdir(parents=True, exist_ok=True)
                atomic_write_text(feedback / nb.name, nbformat.writes(graded))
    for nb in missing:
        why = f"missing: no {nb.name} in the submission"
        run = {"cells": grading._zero(nbformat.read(nb, as_version=4), why), "stopped": why,
               "kernel_score": 0.0}
        report[nb.stem] = _entry(run, submitted)
    return dict(sorted(report.items()))


def _entry(run: dict, submitted: Path) -> dict:
    """One notebook's report from ``grading.run_submission``'s result (:func:`autograde`)."""
    cells = run["cells"]
    return {"score": sum(c[0] for c in cells.values()),
            "max_score": sum(c[1] for c in cells.values()),
            "cells": {g: c[:2] for g, c in cells.items()},
            "messages": {g: c[2] for g, c in cells.items() if c[2]},
            "stopped": run["stopped"], "kernel_score": run["kernel_score"],
            "submission": str(submitted.resolve())}


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m dflash_lite.course", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    release = commands.add_parser("student-edition",
                                  help="write the student edition (blanks, no outputs)")
    release.add_argument("out_dir")
    release.add_argument("--notebooks", nargs="*",
                         help="chapter numbers, e.g. 02 03 (default: all)")
    grade = commands.add_parser("autograde", help="autograde filled-in student notebooks")
    grade.add_argument("submitted_dir")
    grade.add_argument("--notebooks", nargs="*",
                       help="chapter numbers (default: every notebook found)")
    grade.add_argument("--out", help="also write the scores to this JSON file")
    grade.add_argument("--feedback", metavar="DIR",
                       help="also write each graded notebook, with its checks' output, into DIR")
    grade.add_argument("--overwrite", action="store_true",
                       help="let --out and --feedback replace files this command did not write")
    grade.add_argument("--cell-timeout", type=POS, default=grading.Limits.cell_timeout_s, help=(
        "seconds a cell may run before it is interrupted (default: %(default)s)"))
    grade.add_argument("--notebook-timeout", type=POS, default=grading.Limits.notebook_timeout_s,
                       help="seconds a whole notebook may run (default: %(default)s)")
    grade.add_argument("--allow-root", action="store_true",
                       help="grade as root anyway (students' code runs while grading)")
    site = commands.add_parser("site",
                               help="build the course site (HTML) from the executed notebooks")
    site.add_argument("out_dir")
    site.add_argument("--instructor", action="store_true",
                      help="the instructor's site, with the solutions (default: the student site)")
    args = parser.parse_args(argv)
    bad = [n for n in getattr(args, "notebooks", None) or () if not (len(n) == 2 and n.isdigit())]
    if bad or getattr(args, "notebooks", None) == []:
        parser.error(f"--notebooks takes chapter numbers such as 02 03, got {bad or 'none'}")
    if not in_checkout():
        parser.error("the course commands need a checkout of the repository (its notebooks/, docs/ "
                     f"and instructor/ folders); this installed copy ({ROOT / 'dflash_lite'}) "
                     "holds the package only: git clone the project and run them there")
    if args.command == "site":
        try:
            import myst_nb  # noqa: F401  (checked before any work)
            course_site.check_site_dir(Path(args.out_dir).resolve())
        except ImportError:
            parser.error("the site needs the docs dependencies: "
                         "pip install -r docs/requirements.txt")
        except ValueError as e:
            parser.error(str(e))
        print(course_site.build_site(args.out_dir, instructor=args.instructor))
    elif args.command == "student-edition":
        if args.notebooks is not None and not chapters(args.notebooks):
            parser.error(f"no chapter matches {args.notebooks}")
        try:
            for path in student_edition(args.out_dir, args.notebooks):
                print(path)
        except ValueError as e:
            parser.error(str(e))
    elif args.command == "autograde":
        if not Path(args.submitted_dir).is_dir():
            parser.error(f"{args.submitted_dir} is not a directory")
        try:          # the report's place is checked before any grading, like every --out
            out = guard_output_file(args.out, "--out", args.overwrite,
                                    own=grading.is_score_report) if args.out else None
            other = grading.graded_submission(out) if out and not args.overwrite else None
            if other not in (None, str(Path(args.submitted_dir).resolve())):
                raise ValueError(f"--out {args.out!r} holds the scores of {other}: pass "
                                 "--overwrite to replace them, or choose another file")
            limits = grading.Limits(cell_timeout_s=args.cell_timeout,
                                    notebook_timeout_s=args.notebook_timeout)
            report = autograde(args.submitted_dir, args.notebooks, allow_root=args.allow_root,
                               limits=limits, feedback=args.feedback, overwrite=args.overwrite)
        except (ValueError, PermissionError) as e:
            parser.error(str(e))
        for name, nb in report.items():
            stopped = f" (stopped early: {nb['stopped']})" if nb["stopped"] else ""
            print(f"{name}: {nb['score']:g} / {nb['max_score']:g}{stopped}")
        if out is not None:
            atomic_write_text(out, json.dumps(report, indent=1))
    return 0
