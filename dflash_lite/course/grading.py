"""Running a class's submissions for grading, so that no submission can stop the others, change
what grades it, or outlive its grading. :func:`run_submission` restores a notebook's locked cells
from the instructor's, runs it in a kernel sandboxed by :mod:`~dflash_lite.course.sandbox` under
:class:`Limits` (a dead kernel, a timeout or a flood of output stops *this* notebook, whose cells
not reached score 0, saying why), then scores it with :mod:`~dflash_lite.course.grader` in a fresh
``python -I`` process, sandboxed too, that reads no score from the kernel's output
(docs/teaching.md#what-autograde-runs)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ..checkout import ROOT
from . import grader
from .collect import _nbgrader

SANDBOX = Path(__file__).resolve().with_name("sandbox.py")
KERNEL = "dflash-sandbox"


@dataclass
class Limits:
    """Wall-clock limits (cell, notebook, grader), a cell's output, and each process's memory."""
    cell_timeout_s: int = 120
    notebook_timeout_s: int = 1200
    output_kb: int = 256
    memory_mb: int = 8192
    grader_timeout_s: int = 1200


def restore_locked(submitted, source):
    """``submitted`` with every locked or graded cell of ``source`` put back as the instructor
    wrote it (matched by grade id; one the student deleted is not re-added, and so scores 0), and
    no cell that claims to be a grader's collector (only :func:`grader.instrument` adds those)."""
    locked = {_nbgrader(c)["grade_id"]: c for c in source.cells if _nbgrader(c).get("grade_id")
              and (_nbgrader(c).get("locked") or _nbgrader(c).get("grade"))}
    for i, cell in enumerate(submitted.cells):
        cell.get("metadata", {}).pop(grader.COLLECTOR_KEY, None)
        original = locked.get(_nbgrader(cell).get("grade_id"))
        if original is not None:
            restored = nbformat.from_dict(json.loads(json.dumps(original)))
            if restored.cell_type == "code":
                restored.outputs, restored.execution_count = [], None
            submitted.cells[i] = restored
    return submitted


def kernel_score(executed) -> float:
    """What the student's own kernel would have counted, for comparison only (nbgrader's rule: a
    graded cell that raised scores 0; one that printed a number, that number; else its points)."""
    total = 0.0
    for cell in executed.cells:
        meta = _nbgrader(cell)
        if not meta.get("grade") or cell.cell_type != "code" or not cell.get("execution_count"):
            continue
        outputs = cell.get("outputs", [])
        if any(o.get("output_type") == "error" for o in outputs):
            continue
        printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
        printed += "".join(o.get("data", {}).get("text/plain", "") for o in outputs
                           if o.get("output_type") == "execute_result")
        try:
            total += float(printed.strip().splitlines()[-1])
        except (ValueError, IndexError):
            total += float(meta.get("points", 0))
    return total


def sandboxed(command: list[str], hide: list[str], writable: list[str],
              limits: Limits) -> list[str]:
    """``command`` wrapped by :mod:`dflash_lite.course.sandbox` (run as a file, ``python -I``):
    the repository, Python and the home folder read-only, the ``hide`` folders hidden."""
    read_only = sorted({str(ROOT), sys.prefix, sys.base_prefix, os.path.expanduser("~")})
    args = [sys.executable, "-I", str(SANDBOX), f"--memory-mb={limits.memory_mb}"]
    for flag, folders in (("--read-only", read_only), ("--hide", hide), ("--writable", writable)):
        args += [f"{flag}={p}" for p in folders]
    return args + ["--", *command]


def kernel_spec(into: Path, hide: list[str], writable: list[str], env: dict,
                limits: Limits) -> Path:
    """A Jupyter kernel spec, ``into/kernels/dflash-sandbox``: this Python's ipykernel in the
    sandbox, the instructor's folder and the source notebooks hidden too."""
    folder = into / "kernels" / KERNEL
    folder.mkdir(parents=True, exist_ok=True)
    argv = sandboxed([sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                     grader.INSTRUCTOR + hide, writable, limits)
    (folder / "kernel.json").write_text(json.dumps(
        {"argv": argv, "display_name": "dflash-lite (sandboxed)", "language": "python",
         "env": env, "interrupt_mode": "signal"}))
    return into / "kernels"


def _client_class():
    from nbclient import NotebookClient

    class LimitedClient(NotebookClient):
        """nbclient with a cap on the output a cell keeps."""

        def __init__(self, nb, output_bytes: int, **kw):
            super().__init__(nb, **kw)
            self.output_bytes, self.kept = output_bytes, {}

        def output(self, outs, msg, display_id, cell_index):
            size = len(json.dumps(msg.get("content", {})))
            kept = self.kept.get(cell_index, 0)
            self.kept[cell_index] = kept + size
            if kept + size > self.output_bytes:
                if kept <= self.output_bytes:
                    outs.append(nbformat.v4.new_output("stream", name="stderr", text=(
                        f"[grader: output past {self.output_bytes // 1024} kB dropped]\n")))
                return None
            return super().output(outs, msg, display_id, cell_index)

    return LimitedClient


def execute(nb, cwd: Path, kernels: Path, limits: Limits,
            sockets: Path | None = None) -> tuple[object, str]:
    """Run ``nb`` top to bottom in the sandboxed kernel; returns it (with the outputs of what ran)
    and why it stopped early ("" when it ran to the end). ``sockets``: a folder the kernel may
    write, for its sockets as files (IPC), not ports on localhost (TCP, in plain text: without
    one, or where its path is too long for a Unix socket's)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    deadline = time.monotonic() + limits.notebook_timeout_s
    ipc = {"transport": "ipc", "ip": str(sockets / "kernel")} \
        if sockets is not None and len(os.fsencode(sockets)) < 90 else {}
    km = AsyncKernelManager(kernel_name=KERNEL, **ipc,
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    client = _client_class()(
        nb, limits.output_kb << 10, km=km, allow_errors=True,
        timeout_func=lambda cell: max(1, min(limits.cell_timeout_s,
                                             int(deadline - time.monotonic()))),
        interrupt_on_timeout=True, iopub_timeout=10, raise_on_iopub_timeout=False,
        error_on_timeout={"ename": "CellTimeoutError", "evalue": "the cell ran past its limit",
                          "traceback": ["the grader stopped this cell after its time limit"]},
        shutdown_kernel="immediate", resources={"metadata": {"path": str(cwd)}})
    stopped = ""
    try:
        with client.setup_kernel(cwd=str(cwd)):
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                if time.monotonic() >= deadline:
                    stopped = f"the notebook's {limits.notebook_timeout_s} s ran out"
                    break
                client.execute_cell(cell, index)
    except DeadKernelError:
        stopped = "the kernel died (a cell ended its process)"
    except CellTimeoutError:
        stopped = f"a cell ran past its {limits.cell_timeout_s} s and could not be interrupted"
    except Exception as e:  # noqa: BLE001  (any other failure stops this notebook only)
        stopped = f"the run stopped: {type(e).__name__}: {e}".splitlines()[0][:200]
    finally:
        with contextlib.suppress(Exception):      # already gone
            if run_sync(km.is_alive)():
                run_sync(km.shutdown_kernel)(now=True)
    return nb, stopped


def score(source_path: Path, executed_path: Path, hidden: Path, scratch: Path,
          limits: Limits) -> dict:
    """The grader's report on an executed notebook; ``{"error": why}`` on failure."""
    report = scratch / "report.json"
    program = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
               "from dflash_lite.course.grader import main; sys.exit(main())")
    command = [sys.executable, "-I", "-c", program, str(ROOT), str(source_path),
               str(executed_path), "--hidden", str(hidden), "--report", str(report)]
    env = {**os.environ, "MPLBACKEND": "Agg", "MPLCONFIGDIR": str(scratch / "mpl"),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "DFLASH_LITE_FIGURES": str(scratch / "figures"),
           "DFLASH_LITE_RESULTS": str(scratch / "results")}
    # the grader reads the instructor's folder: only the kernel's view hides it
    args = sandboxed(command, [], [str(scratch)], limits)
    try:
        run = subprocess.run(args, capture_output=True, text=True, cwd=scratch, env=env,
                             timeout=limits.grader_timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"the grader did not finish in {limits.grader_timeout_s} s"}
    if run.returncode != 0 or not report.is_file():
        last = [line for line in run.stderr.splitlines() if line.strip()]
        return {"error": f"the grader failed ({last[-1][:200] if last else run.returncode})"}
    return json.loads(report.read_text())


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def _zero(source, why: str) -> dict[str, list]:
    """Every graded cell of ``source`` at 0 points, for ``why``."""
    return {_nbgrader(c)["grade_id"]: [0.0, float(_nbgrader(c).get("points", 0)), why]
            for c in source.cells if _nbgrader(c).get("grade")}


def run_submission(source_path: Path, submitted_path: Path, work: Path, hidden: Path,
                   limits: Limits, env: dict) -> dict:
    """Restore, execute and score one submitted notebook; every failure is this notebook's. The
    result's ``graded``: the executed notebook as kept (None when there was no notebook to run)."""
    name = source_path.stem
    cwd, graded, scratch = work / "run" / name, work / "graded", work / "score" / name
    for folder in (cwd, graded, scratch):
        folder.mkdir(parents=True, exist_ok=True)
    source = nbformat.read(source_path, as_version=4)
    try:
        submitted = nbformat.read(submitted_path, as_version=4)
    except Exception as e:  # noqa: BLE001  (nbformat raises several kinds for a non-notebook)
        cells = _zero(source, f"not a notebook ({type(e).__name__})")
        return {"cells": cells, "stopped": "not a notebook", "kernel_score": 0.0, "graded": None}
    nb = restore_locked(submitted, source)
    grader.instrument(nb, source)
    # the instructor's files wherever they are, unless the kernel's own folders are inside them
    instructor = [p for p in {hidden.resolve().parent, source_path.resolve().parent}
                  if not _inside(work.resolve(), p)]
    sockets = Path(tempfile.mkdtemp(prefix="dflash-kernel-"))    # short, as a socket's path is
    try:
        kernels = kernel_spec(work / "jupyter" / name,
                              [str(graded), str(work / "score"), *map(str, instructor)],
                              [str(cwd), str(work / "outputs"), str(sockets)], env, limits)
        executed, stopped = execute(nb, cwd, kernels, limits, sockets)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    # the grader scores the run with its collectors' lines, from a folder it cannot write (only
    # its scratch below is) and kernels cannot see; the copy kept as feedback is without them
    path = scratch.parent / f"{name}.ipynb"
    nbformat.write(executed, path)
    cells = score(source_path, path, hidden, scratch, limits)
    executed.cells = [c for c in executed.cells if grader.COLLECTOR_KEY not in c.metadata]
    nbformat.write(executed, graded / f"{name}.ipynb")
    if "error" in cells:
        cells = _zero(source, cells["error"])
    elif stopped:
        cells = {g: c if c[0] or "not reached" not in c[2]
                 else [0.0, c[1], f"not reached: {stopped}"] for g, c in cells.items()}
    shutil.rmtree(cwd, ignore_errors=True)
    return {"cells": cells, "stopped": stopped, "kernel_score": kernel_score(executed),
            "graded": executed}


def graded_submission(path: Path) -> str | None:
    """The submission folder an earlier report at ``path`` scored (None: none, or an old report)."""
    if not is_score_report(path):
        return None
    return next((nb.get("submission") for nb in json.loads(path.read_text()).values()), None)


def is_score_report(path: Path) -> bool:
    """An earlier ``autograde --out``: a JSON object of notebooks, each with its score."""
    try:
        report = json.loads(path.read_text()) if path.stat().st_size < 1 << 24 else None
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and all(isinstance(v, dict) and {"score", "max_score"} <= set(v)
                                            for v in report.values())
