"""Issue 32's adversarial re-test as a runnable case table.

Rebuilds every case the issue names (each bullet and each row of its table), runs each as a
subprocess with a timeout, and prints a markdown table: case | command | exit code | seconds |
the last stderr line | verdict. OK means: one line and exit 2 (or a clean exit 0 where the case
must work), no traceback, no hang, and nothing written where it should not be.

Nothing here touches the repository: the whole repository (package, notebooks, results) is copied
into a temporary folder, the commands import that copy (PYTHONPATH) and every destructive case
works on files under the temporary folder. The repository's package and notebooks are hashed
before and after, and the table says if they changed.

    python tools/reliability_cases.py [--only SUBSTRING ...] [--out TABLE.md] [--keep]

Cases that need an unprivileged user (a read-only folder, grading) run under ``setpriv`` as
``nobody`` when this runs as root and ``setpriv`` is there; otherwise they say so.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
GiB = 2 ** 30
PROGRESS = re.compile(r"\d+/\d+ \[|it/s\]|s/it\]")
FAST_TRAIN = ["--steps", "2", "--num-math", "4", "--num-code", "0", "--max-new-tokens", "16",
              "--batch-size", "2", "--layers", "1", "--block-size", "4", "--num-anchors", "2",
              "--eval-every", "0"]
FAST_BENCH = ["--num-prompts", "1", "--max-new-tokens", "8", "--block-sizes", "4",
              "--repeats", "1", "--tree-sizes", "", "--cost-repeats", "1", "--no-baselines",
              "--no-hf-dflash"]
NOTEBOOK = "02_speculative_decoding.ipynb"
NOBODY = 65534


@dataclass
class Case:
    name: str
    before: str                       # what the issue says happened at 96346d4
    build: Callable                   # (Ctx, case dir) -> Run
    timeout: float = 60.0


@dataclass
class Run:
    argv: list                        # after "python": ["-m", "dflash_lite", ...] or ["-c", ...]
    short: str                        # the command as the table shows it
    expect: int = 2                   # the exit code that is right
    check: Callable[[], str | None] = lambda: None      # what went wrong on disk, or None
    cwd: Path | None = None
    as_nobody: bool = False
    env: dict = field(default_factory=dict)
    lines: int | None = 1             # stderr lines (besides progress bars) allowed; None: any
    python: str = PY                  # the interpreter
    not_rebuilt: str | None = None


class Ctx:
    """The temporary world: a copy of the repository the commands import, and helpers."""

    def __init__(self, root: Path):
        self.root = root
        self.repo = root / "repo"
        shutil.copytree(REPO, self.repo, symlinks=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "__pycache__", "*.pyc", ".pytest_cache", "_build", ".ruff_cache"))
        self.package = self.repo / "dflash_lite"
        self.tiny = self.package / "models" / "tiny"
        self.tiny_dflash = self.package / "models" / "tiny-dflash"
        self.home = root / "home"
        self.home.mkdir()

    def env(self, run: Run) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH_LITE")}
        env.update(PYTHONPATH=str(self.repo), HOME=str(self.home), PYTHONUNBUFFERED="1",
                   OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"),
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   XDG_CACHE_HOME=str(self.home / ".cache"), MPLBACKEND="Agg",
                   DFLASH_LITE_FIGURES=str(self.root / "figures"),
                   DFLASH_LITE_RESULTS=str(self.root / "results"))
        if run.as_nobody:             # nobody cannot look into /root (pyenv shims and the like)
            home = Path(tempfile.mkdtemp(prefix="home-", dir=self.root))
            home.chmod(0o777)
            env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
            for var in ("DFLASH_LITE_FIGURES", "DFLASH_LITE_RESULTS"):
                env.pop(var)                   # grading keeps the runs' files in its own folder
            env["PATH"] = os.pathsep.join([str(Path(PY).parent), "/usr/local/bin", "/usr/bin",
                                           "/bin"])
        else:
            env["PATH"] = os.pathsep.join([str(Path(PY).parent), env.get("PATH", "")])
        env.update(run.env)
        return env


# ----------------------------------------------------------------------------- helpers
def snapshot(path: Path) -> dict:
    """Every entry under ``path`` (or ``path`` itself): type, mode and content hash."""
    out = {}
    items = [path] if not path.is_dir() or path.is_symlink() else [path, *path.rglob("*")]
    for p in items:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        digest = None
        if stat.S_ISREG(st.st_mode):
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        elif stat.S_ISLNK(st.st_mode):
            digest = os.readlink(p)
        out[str(p)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), digest)
    return out


def unchanged(*paths: Path) -> Callable[[], str | None]:
    """A check: ``paths`` are as they were when the case was built."""
    before = {p: snapshot(p) for p in paths}

    def check() -> str | None:
        for p, was in before.items():
            now = snapshot(p)
            if now != was:
                changed = sorted(set(now.items()) ^ set(was.items()))
                return f"{Path(changed[0][0]).name if changed else p.name} changed under {p.name}"
        return None
    return check


def all_of(*checks) -> Callable[[], str | None]:
    def check() -> str | None:
        for c in checks:
            why = c()
            if why:
                return why
        return None
    return check


def absent(path: Path, what: str) -> Callable[[], str | None]:
    return lambda: f"{what} ({path.name} exists)" if path.exists() else None


def cli(*args) -> list:
    return ["-m", "dflash_lite", *map(str, args)]


def edit_json(file: Path, change) -> None:
    raw = json.loads(file.read_text())
    change(raw)
    file.write_text(json.dumps(raw))


def target_copy(ctx: Ctx, d: Path, name: str = "target") -> Path:
    return Path(shutil.copytree(ctx.tiny, d / name))


def drafter_copy(ctx: Ctx, d: Path) -> Path:
    return Path(shutil.copytree(ctx.tiny_dflash, d / "drafter"))


class Payload:
    """Unpickling this creates a marker file: proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def nobody_python(ctx: Ctx) -> tuple[str | None, dict | str]:
    """An interpreter that ``nobody`` can start, and its environment: this venv's interpreter may
    live where only root can look (pyenv under /root), so the system's python of the same minor
    version with this venv's site-packages on PYTHONPATH, and an ``alembic`` (nbgrader runs it)
    that uses it."""
    import sysconfig
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = shutil.which(version, path="/usr/bin:/bin:/usr/local/bin")
    if python is None:
        return None, f"no /usr/bin/{version} that nobody can run"
    bin_dir = ctx.root / "nobody-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "alembic").write_text(f"#!{python}\nimport sys\nfrom alembic.config import main\n"
                                     "sys.exit(main())\n")
    (bin_dir / "alembic").chmod(0o755)
    site = sysconfig.get_paths()["purelib"]
    return python, {"PYTHONPATH": os.pathsep.join([str(ctx.repo), site]),
                    "PATH": os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])}


def open_for(path: Path, uid: int = NOBODY) -> None:
    """Let ``nobody`` walk down to ``path`` (the temporary folders are 0700)."""
    for p in [path, *path.parents]:
        if p == Path("/"):
            break
        mode = stat.S_IMODE(os.stat(p).st_mode)
        os.chmod(p, mode | 0o055 if p.is_dir() else mode | 0o044)


# ----------------------------------------------------------------------------- the cases
def code_from_files() -> list[Case]:
    def pickle_target(ctx, d):
        folder = target_copy(ctx, d)
        marker = d / "code-ran"
        (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Payload(marker)))
        return Run(cli("demo", "--target", folder, "--max-new-tokens", "8", "--repeats", "1"),
                   "demo --target T (model.safetensors + malicious pytorch_model.bin)",
                   check=absent(marker, "the pickle ran"))

    def pickle_drafter(ctx, d):
        folder = drafter_copy(ctx, d)
        marker = d / "code-ran"
        (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Payload(marker)))
        return Run(cli("bench", "--drafter", folder, *FAST_BENCH),
                   "bench --drafter D (drafter.safetensors + malicious pytorch_model.bin)",
                   check=absent(marker, "the pickle ran"))

    def grade_as_root(ctx, d):
        sub = d / "submitted"
        sub.mkdir()
        shutil.copy(ctx.repo / "notebooks" / NOTEBOOK, sub / NOTEBOOK)
        if os.geteuid() != 0:
            return Run([], "", not_rebuilt="not run as root: nothing to refuse")
        return Run(["-m", "dflash_lite.course", "autograde", str(sub), "--notebooks", "02"],
                   "course autograde SUB (as root, no --allow-root)",
                   check=unchanged(ctx.package / "exercises"))

    def grade_in_repo(ctx, d):
        sub = ctx.repo / "submissions"
        sub.mkdir(exist_ok=True)
        shutil.copy(ctx.repo / "notebooks" / NOTEBOOK, sub / NOTEBOOK)
        return Run(["-m", "dflash_lite.course", "autograde", str(sub), "--allow-root",
                    "--notebooks", "02"], "course autograde REPO/submissions --allow-root",
                   check=unchanged(ctx.package / "exercises"))

    def grade_hostile(ctx, d):
        """A submission that writes a module into the package it imports and a file outside its
        folder, graded by an unprivileged user (as the autograde note says to)."""
        import nbformat
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            return Run([], "", not_rebuilt="needs root and setpriv to grade as nobody")
        python, env = nobody_python(ctx)
        if python is None:
            return Run([], "", not_rebuilt=env)
        sub = d / "submitted"
        sub.mkdir()
        victim = ctx.root / "a-users-files"            # root's, as the grader's own files are
        victim.mkdir(exist_ok=True)
        outside = victim / "outside.txt"
        nb = nbformat.read(ctx.repo / "notebooks" / NOTEBOOK, as_version=4)
        evil = ("import dflash_lite, pathlib\n"
                "for _p in (pathlib.Path(dflash_lite.__file__).parent / 'exercises' / 'evil.py',"
                f" pathlib.Path({str(outside)!r}),"
                f" pathlib.Path({str(ctx.package / 'exercises' / 'evil2.py')!r})):\n"
                "    try:\n        _p.write_text('planted = True\\n')\n"
                "    except OSError:\n        pass\n")
        for cell in nb.cells:
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                cell.source = evil + cell.source
                break
        nbformat.write(nb, sub / NOTEBOOK)
        for p in (sub, d):
            open_for(p)
        os.chmod(d, 0o777)             # nobody may write here, not in the package nor victim/
        open_for(ctx.repo)
        open_for(victim)
        return Run(["-m", "dflash_lite.course", "autograde", str(sub), "--notebooks", "02"],
                   "course autograde SUB (hostile submission, as nobody)", expect=0, lines=None,
                   as_nobody=True, cwd=d, python=python, env=env,
                   check=all_of(unchanged(ctx.package),
                                absent(outside, "wrote outside its folder")))

    return [
        Case("pickle beside safetensors (target)", "weights loaded from the pickle via "
             "torch.load; only weights_only stopped it", pickle_target),
        Case("pickle beside safetensors (drafter)", "(same promise for drafters)", pickle_drafter),
        Case("autograde as root", "runs submitted code as the user who grades", grade_as_root),
        Case("autograde a folder inside the repo", "(What to build 4: refuse it)", grade_in_repo),
        Case("autograde a hostile submission", "wrote a file outside its folder and a module "
             "into dflash_lite/exercises/", grade_hostile, timeout=900),
    ]


def outputs_lose_data() -> list[Case]:
    def symlinked_lock(ctx, d):
        precious = d / "precious.txt"
        precious.write_text("the user's file")
        (d / ".run.lock").symlink_to(precious)
        return Run(cli("train", "--out", d / "run", *FAST_TRAIN),
                   "train --out DIR (.DIR.lock -> user's file)", check=unchanged(d))

    def foreign_lock(ctx, d):
        (d / ".run.lock").write_text("my own notes")
        return Run(cli("train", "--out", d / "run", *FAST_TRAIN),
                   "train --out DIR (user's own .DIR.lock)", check=unchanged(d))

    def unmarked_old(ctx, d):
        out = Path(shutil.copytree(ctx.tiny_dflash, d / "run"))
        (out / ".dflash-lite-output").write_text("{}")
        (d / ".run.old").mkdir()
        (d / ".run.old" / "thesis.tex").write_text("years of work")
        return Run(cli("train", "--out", out, "--overwrite", *FAST_TRAIN),
                   "train --out DIR --overwrite (user's .DIR.old)", check=unchanged(d))

    def json_device(ctx, d):
        device = d / "null"
        if os.geteuid() == 0:
            os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
            what = "mknod copy of /dev/null"
        else:
            os.mkfifo(device)
            what = "a fifo (not root: no mknod)"
        return Run(cli("bench", "--json", device, *FAST_BENCH), f"bench --json DEV ({what})",
                   check=unchanged(d))

    def json_0600(ctx, d):
        report = d / "r.json"
        report.write_text(json.dumps({"env": {}, "methods": []}))
        report.chmod(0o600)
        before = report.read_text()

        def check():
            mode = stat.S_IMODE(report.stat().st_mode)
            if mode != 0o600:
                return f"mode became {mode:o}"
            return "the report was not replaced" if report.read_text() == before else None
        return Run(cli("bench", "--json", report, *FAST_BENCH),
                   "bench --json R (an earlier 0600 report)", expect=0, lines=None, check=check,
                   cwd=d)

    def json_foreign(ctx, d):
        (d / "notes.json").write_text('{"mine": 1}')
        return Run(cli("bench", "--json", d / "notes.json", *FAST_BENCH),
                   "bench --json notes.json (not a bench report)", check=unchanged(d))

    def site_index(ctx, d):
        site = d / "site"
        site.mkdir()
        (site / "index.html").write_text("<p>my homepage</p>")
        return Run(["-m", "dflash_lite.course", "site", str(site)],
                   "course site DIR (holds a user's index.html)", check=unchanged(d))

    def edition_notebooks(ctx, d):
        out = d / "edition"
        out.mkdir()
        shutil.copy(ctx.repo / "notebooks" / NOTEBOOK, out / NOTEBOOK)
        return Run(["-m", "dflash_lite.course", "student-edition", str(out), "--notebooks", "02"],
                   "course student-edition DIR (holds notebooks)", check=unchanged(d))

    def edition_source(ctx, d):
        return Run(["-m", "dflash_lite.course", "student-edition", "notebooks", "--notebooks",
                    "02"], "course student-edition notebooks --notebooks 02 (in the repo)",
                   cwd=ctx.repo, check=unchanged(ctx.repo / "notebooks"))

    def card_package(ctx, d):
        return Run(["-m", "dflash_lite.zoo", "card", str(ctx.tiny)],
                   "zoo card dflash_lite/models/tiny", cwd=ctx.repo, check=unchanged(ctx.tiny))

    def drafter_card_package(ctx, d):
        return Run(["-m", "dflash_lite.zoo", "drafter-card", str(ctx.tiny_dflash)],
                   "zoo drafter-card dflash_lite/models/tiny-dflash", cwd=ctx.repo,
                   check=unchanged(ctx.tiny_dflash))

    def card_read_only(ctx, d):
        folder = target_copy(ctx, d, "tiny")
        if os.geteuid() == 0 and not shutil.which("setpriv"):
            return Run([], "", not_rebuilt="root without setpriv: a 0555 folder is writable")
        open_for(folder)
        open_for(ctx.repo)
        os.chmod(d, 0o777)
        folder.chmod(0o555)
        check = unchanged(folder)
        return Run(["-m", "dflash_lite.zoo", "card", str(folder)],
                   "zoo card DIR (0555, as nobody)", as_nobody=os.geteuid() == 0, check=check,
                   cwd=d)

    def json_config(ctx, d):
        return Run(cli("bench", "--json", ctx.tiny / "config.json", *FAST_BENCH),
                   "bench --json dflash_lite/models/tiny/config.json", cwd=ctx.repo,
                   check=unchanged(ctx.tiny))

    def json_notebook(ctx, d):
        nb = d / "notebooks" / NOTEBOOK
        nb.parent.mkdir()
        shutil.copy(ctx.repo / "notebooks" / NOTEBOOK, nb)
        return Run(cli("bench", "--json", nb, *FAST_BENCH), "bench --json a source notebook",
                   check=unchanged(nb.parent))

    def cache_dir_package(ctx, d):
        return Run(cli("train", "--out", d / "run", "--cache-dir", ctx.tiny, *FAST_TRAIN),
                   "train --cache-dir dflash_lite/models/tiny",
                   check=all_of(unchanged(ctx.package / "models"), absent(d / "run", "out made")))

    def grade_out_package(ctx, d):
        sub = d / "submitted"
        sub.mkdir()
        shutil.copy(ctx.repo / "notebooks" / NOTEBOOK, sub / NOTEBOOK)
        return Run(["-m", "dflash_lite.course", "autograde", str(sub), "--allow-root",
                    "--out", str(ctx.tiny / "card.json")],
                   "course autograde SUB --out dflash_lite/models/tiny/card.json",
                   check=unchanged(ctx.tiny))

    def site_package(ctx, d):
        return Run(["-m", "dflash_lite.course", "site", str(ctx.package / "site")],
                   "course site dflash_lite/site", check=unchanged(ctx.package))

    return [
        Case("lock is a symlink to a user's file", "the file truncated, the PID written in",
             symlinked_lock),
        Case("a user's own .DIR.lock file", "truncated, then deleted", foreign_lock),
        Case("--overwrite with a user's .DIR.old", "the user's .DIR.old folder deleted",
             unmarked_old),
        Case("bench --json onto a device file", "the device replaced by a regular file",
             json_device),
        Case("bench --json onto a 0600 report", "left it 0644", json_0600, timeout=400),
        Case("bench --json onto a foreign file", "(What to build 1: refuse without --overwrite)",
             json_foreign),
        Case("course site over an index.html", "overwrites the existing index.html", site_index),
        Case("student-edition over notebooks", "overwrites existing notebooks there",
             edition_notebooks),
        Case("student-edition onto the source notebooks", "writes over notebooks/02..., exit 0; "
             "solutions and outputs gone", edition_source),
        Case("zoo card of the shipped target", "rewrites the shipped card", card_package),
        Case("zoo drafter-card of the shipped drafter", "(same guard for the drafter's card)",
             drafter_card_package),
        Case("zoo card of a read-only folder", "fails only after 575 s of evaluation",
             card_read_only),
        Case("bench --json onto the shipped config", "overwrites it with a report, exit 0; the "
             "next demo fails: model_type None", json_config),
        Case("bench --json over a source notebook", "(What to build 3: a source notebook)",
             json_notebook),
        Case("train --cache-dir in the shipped model", "writes its cache there, exit 0",
             cache_dir_package),
        Case("autograde --out into the package", "(What to build 1: autograde --out guarded)",
             grade_out_package),
        Case("course site inside the package", "(What to build 1: site guarded)", site_package),
    ]


THREADS = r"""
import sys, threading
from dflash_lite.decoding.engine import Engine
prompts = ["Question: Ann has 3 pens and buys 4 more. How many pens?",
           "def add(a, b):", "Question: 12 apples, 5 eaten. How many left?", "The capital of"]
eager = Engine.from_pretrained("tiny", block_size=4)
want = [eager.generate(p, 12) for p in prompts]
engine = Engine.from_pretrained("tiny", block_size=4, compile=True)
engine.generate(prompts[0], 12)                                  # compiled once, before threads
got, errors, start = {}, {}, threading.Barrier(4)
def call(i):
    start.wait()
    try:
        got[i] = engine.generate(prompts[i], 12)
    except RuntimeError as e:
        errors[i] = str(e)
threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
[t.start() for t in threads]; [t.join() for t in threads]
wrong = [i for i in got if got[i] != want[i]]
after = [engine.generate(p, 12) for p in prompts]             # the engine still works after
bad = any("\n" in m or "another call" not in m for m in errors.values())
print(f"{len(got)} answered, {len(errors)} refused, {len(wrong)} wrong, after: "
      f"{sum(a == w for a, w in zip(after, want))}/4 right", file=sys.stderr)
if errors:
    print(sorted(errors.values())[0], file=sys.stderr)
sys.exit(1 if wrong or bad or after != want or not got else 0)
"""


def wrong_answers() -> list[Case]:
    def threads(ctx, d):
        return Run(["-c", THREADS], "Engine(compile=True).generate from 4 threads (snippet)",
                   expect=0, lines=None, cwd=d)

    def mask(ctx, d):
        folder = drafter_copy(ctx, d)
        edit_json(folder / "drafter_config.json", lambda r: r["config"].update(mask_token_id=5))
        return Run(cli("bench", "--drafter", folder, *FAST_BENCH),
                   "bench --drafter D (another mask token)")

    def taps(ctx, d, command="bench"):
        folder = drafter_copy(ctx, d)
        edit_json(folder / "drafter_config.json",
                  lambda r: r["config"].update(target_layer_ids=[1, 2, 3, 4, 40]))
        rest = FAST_BENCH if command == "bench" else ["--max-new-tokens", "8", "--repeats", "1"]
        return Run(cli(command, "--drafter", folder, *rest),
                   f"{command} --drafter D (a tap at layer 40 of 8)")

    def missing(ctx, d):
        from safetensors.torch import load_file, save_file
        folder = target_copy(ctx, d)
        tensors = load_file(str(folder / "model.safetensors"))
        for name in sorted(tensors)[-2:]:
            tensors.pop(name)
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return Run(cli("demo", "--target", folder, "--max-new-tokens", "8", "--repeats", "1"),
                   "demo --target T (two tensors missing)")

    return [
        Case("compiled engine from 4 threads", "3 threads RuntimeError, the 4th returns another "
             "prompt's continuation", threads, timeout=480),
        Case("bench, drafter with another mask token", "exit 0, tau 3.00 instead of about 7",
             mask),
        Case("bench, drafter taps beyond the target", "runs every method, then a traceback",
             taps),
        Case("target missing two tensors", "runs on random weights, exit 0, a warning table",
             missing),
    ]


def template_case(template: str, short: str):
    def build(ctx, d):
        folder = target_copy(ctx, d)
        edit_json(folder / "tokenizer_config.json", lambda r: r.update(chat_template=template))
        return Run(cli("demo", "--target", folder, "--max-new-tokens", "8", "--repeats", "1"),
                   f"demo --target T (chat template: {short})")
    return build


def hangs_and_sizes() -> list[Case]:
    def argv_case(argv, short, out=False):
        def build(ctx, d):
            args = [a.replace("{out}", str(d / "run")) for a in argv]
            return Run(cli(*args), short, check=absent(d / "run", "out made") if out else
                       (lambda: None))
        return build

    def big_config(ctx, d):
        folder = target_copy(ctx, d)
        edit_json(folder / "config.json", lambda r: r.update(
            hidden_size=5120, intermediate_size=25600, num_hidden_layers=30,
            num_attention_heads=40, num_key_value_heads=8, head_dim=128, vocab_size=151936,
            layer_types=None))
        return Run(cli("demo", "--target", folder, "--max-new-tokens", "8", "--repeats", "1"),
                   "demo --target T (a 14.9B-parameter config)")

    def killed_run(ctx, d):
        out = d / "run"
        (out / "checkpoint").mkdir(parents=True)
        (out / ".dflash-lite-output").write_text("{}")
        (out / "checkpoint" / ".trainer_state.safetensors.a1b2c3d4.tmp").write_bytes(b"")
        (out / ".drafter.safetensors.x_y_z_12.tmp").write_bytes(b"\0" * 10)

        def check():
            return None if (out / "drafter.safetensors").is_file() else "no drafter written"
        return Run(cli("train", "--out", out, *FAST_TRAIN),
                   "train --out DIR (a killed run's empty .tmp files, planted)", expect=0,
                   lines=None, check=check, cwd=d)

    nested = ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}"
              "{% endfor %}")
    quadratic = ("{% set ns = namespace(s='') %}{% for i in range(100000) %}"
                 "{% set ns.s = ns.s ~ 'x' * 100 %}{% endfor %}{{ ns.s[:3] }}")
    return [
        Case("bench --repeats 1000000000", "memory grows ~150 MB/s without bound",
             argv_case(["bench", "--repeats", "1000000000"], "bench --repeats 1000000000")),
        Case("train --max-new-tokens 100000", "never checked against the 1024-token context",
             argv_case(["train", "--out", "{out}", "--max-new-tokens", "100000"],
                       "train --out DIR --max-new-tokens 100000", out=True)),
        Case("template: nested range(100000) loops", "renders for over 90 s",
             template_case(nested, "nested range(100000)")),
        Case("template: a string built quadratically", "renders for over 90 s",
             template_case(quadratic, "quadratic string")),
        Case("a 14.9B-parameter config", "passes the 16B check, needs about 60 GB", big_config),
        Case("train --num-anchors 100000 -b 64 --block-size 64", "allocates 3.3 GB at once",
             argv_case(["train", "--out", "{out}", "--num-anchors", "100000", "--batch-size",
                        "64", "--block-size", "64"],
                       "train --num-anchors 100000 --batch-size 64 --block-size 64", out=True)),
        Case("a killed run's empty .tmp files", "the same command refuses to resume",
             killed_run, timeout=400),
    ]


def tracebacks() -> list[Case]:
    def long_json(ctx, d):
        return Run(cli("bench", "--json", d / ("r" * 5000 + ".json"), *FAST_BENCH),
                   "bench --json <5000-char name>", check=unchanged(d))

    def long_out(ctx, d):
        return Run(cli("train", "--out", d / ("o" * 5000), *FAST_TRAIN),
                   "train --out <5000-char name>", check=unchanged(d))

    def nested_prompts(ctx, d):
        path = d / "nested.jsonl"
        path.write_text('{"prompt": "ok"}\n' + "[" * 100_000 + "\n")
        return Run(cli("bench", "--prompts", path, "--num-prompts", "2", *FAST_BENCH[2:]),
                   "bench --prompts (deeply nested JSON) --num-prompts 2")

    def tokenizer_beyond(ctx, d):
        from transformers import AutoTokenizer
        folder = target_copy(ctx, d)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        tokenizer.add_tokens(["<beyond-the-embedding>"])
        tokenizer.save_pretrained(folder)
        return Run(cli("demo", "--target", folder, "--prompt", "<beyond-the-embedding> hi",
                       "--max-new-tokens", "8", "--repeats", "1"),
                   "demo --target T (tokenizer id beyond the embedding)")

    def drafter_edit(change, short):
        def build(ctx, d):
            folder = drafter_copy(ctx, d)
            change(folder)
            return Run(cli("demo", "--drafter", folder, "--max-new-tokens", "8", "--repeats",
                           "1"), f"demo --drafter D ({short})")
        return build

    def public_list(ctx, d):
        script = ("import sys, torch\nfrom dflash_lite.decoding.target import load_pretrained\n"
                  "from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig\n"
                  "from dflash_lite.decoding.checkpoints import export_dflash\n"
                  "m, t = load_pretrained('tiny'); torch.manual_seed(1)\n"
                  "c = DrafterConfig.from_target(m.config, t.mask_token_id, num_layers=2,"
                  " block_size=16)\nexport_dflash(DFlashDrafter(c).eval(), sys.argv[1])\n")
        folder = d / "public"
        subprocess.run([PY, "-c", script, str(folder)], check=True, cwd=d,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True)
        edit_json(folder / "config.json", lambda r: r.update(dflash_config=[1]))
        return Run(cli("demo", "--drafter", folder, "--max-new-tokens", "8", "--repeats", "1"),
                   "demo --drafter D (public layout, dflash_config a list)")

    def include(ctx, d):
        return template_case("{% include 'other.jinja' %}", "include")(ctx, d)

    def sparse(num):
        def build(ctx, d):
            path = d / "huge.jsonl"
            with open(path, "wb") as fh:
                fh.write(b'{"prompt": "first"}\n{"prompt": "second"}\n')
                fh.truncate(3 * GiB)
            rest = FAST_BENCH[2:]
            return Run(cli("bench", "--prompts", path, "--num-prompts", num, *rest),
                       f"bench --prompts <3 GB sparse> --num-prompts {num}",
                       expect=0 if num == "2" else 2, lines=None if num == "2" else 1, cwd=d)
        return build

    def random_layers(ctx, d):
        return Run(cli("bench", "--random-drafter-layers", "20000", "--no-baselines"),
                   "bench --random-drafter-layers 20000")

    def train_layers(ctx, d, more=()):
        return Run(cli("train", "--out", d / "run", "--layers", "20000", *more),
                   "train --out DIR --layers 20000" + (" " + " ".join(more) if more else ""),
                   check=absent(d / "run", "out made"))

    own = "drafter_config.json"
    return [
        Case("bench --json with a 5,000-char name", "OSError: [Errno 36] File name too long",
             long_json),
        Case("train --out with a 5,000-char name", "OSError: [Errno 36] File name too long",
             long_out),
        Case("prompts file with deeply nested JSON", "RecursionError", nested_prompts),
        Case("tokenizer id outside the embedding", "IndexError: index out of range in self",
             tokenizer_beyond),
        Case("drafter config lacks its config key", "KeyError: 'config'", drafter_edit(
            lambda f: edit_json(f / own, lambda r: r.pop("config")), "no 'config' key")),
        Case("drafter config, unknown activation", "KeyError: 'bogus_act'", drafter_edit(
            lambda f: edit_json(f / own, lambda r: r["config"].update(hidden_act="bogus_act")),
            "hidden_act bogus_act")),
        Case("public layout, dflash_config a list", "AttributeError: 'list' object has no "
             "attribute 'get'", public_list),
        Case("demo, drafter taps beyond the target", "IndexError: tuple index out of range, at "
             "the first draft", _taps_demo),
        Case("template: raise_exception", "jinja2.exceptions.TemplateError",
             template_case("{{ raise_exception('no system role') }}", "raise_exception")),
        Case("template: include", "TypeError: no loader for this environment specified",
             include),
        Case("template: allocates without bound", "MemoryError, after the memory is gone",
             template_case("{{ 'a' * 100000000000 }}", "'a' * 1e11")),
        Case("3 GB sparse prompts file, --num-prompts 2", "MemoryError: the whole file is read",
             sparse("2"), timeout=180),
        Case("3 GB sparse prompts file, --num-prompts 3", "MemoryError: the whole file is read",
             sparse("3")),
        Case("--random-drafter-layers 20000", "DefaultCPUAllocator: can't allocate memory",
             random_layers),
        Case("train --layers 20000", "DefaultCPUAllocator: can't allocate memory (~63 GB)",
             train_layers),
        Case("train --layers 20000 --drafting draft-model", "(the draft-model drafter too)",
             lambda ctx, d: train_layers(ctx, d, ("--drafting", "draft-model"))),
    ]


def _taps_demo(ctx, d):
    folder = drafter_copy(ctx, d)
    edit_json(folder / "drafter_config.json",
              lambda r: r["config"].update(target_layer_ids=[1, 2, 3, 4, 40]))
    return Run(cli("demo", "--drafter", folder, "--max-new-tokens", "8", "--repeats", "1"),
               "demo --drafter D (a tap at layer 40 of 8)")


def all_cases() -> list[tuple[str, list[Case]]]:
    return [("Code from files", code_from_files()), ("Outputs lose data", outputs_lose_data()),
            ("Wrong answers", wrong_answers()), ("Hangs and allocations", hangs_and_sizes()),
            ("Tracebacks (the issue's table)", tracebacks())]


# ----------------------------------------------------------------------------- running
def run_case(ctx: Ctx, case: Case, index: int) -> dict:
    d = ctx.root / f"case{index:02d}"
    d.mkdir()
    try:
        run = case.build(ctx, d)
    except Exception as e:                                       # the case could not be built
        return {"code": "-", "seconds": "-", "line": f"{type(e).__name__}: {e}"[:120],
                "verdict": "not rebuilt: " + str(e)[:80], "short": "-"}
    if run.not_rebuilt:
        return {"code": "-", "seconds": "-", "line": "-", "short": run.short or "-",
                "verdict": "not rebuilt: " + run.not_rebuilt}
    prefix = []
    if run.as_nobody:
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    started = time.monotonic()
    proc = subprocess.Popen([*prefix, run.python, *run.argv], cwd=run.cwd or d, env=ctx.env(run),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=case.timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        for pid in descendants(proc.pid):      # a kernel may have a session of its own
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    seconds = time.monotonic() - started
    lines = [x for x in re.split(r"[\r\n]", err) if x.strip() and not PROGRESS.search(x)]
    last = lines[-1].strip() if lines else "(no stderr)"
    problems = []
    if code is None:
        problems.append(f"hang: killed after {case.timeout:.0f} s")
    if "Traceback" in err:
        problems.append("traceback")
    if code is not None and code != run.expect:
        problems.append(f"exit {code}, not {run.expect}")
    if run.lines is not None and code == run.expect and len(lines) != run.lines:
        problems.append(f"{len(lines)} stderr lines, not {run.lines}")
    try:
        why = run.check()
    except Exception as e:
        why = f"check failed: {type(e).__name__}: {e}"
    if why:
        problems.append(why)
    if os.environ.get("CASES_VERBOSE") and problems:
        print(f"--- {case.name}\n{err[-3000:]}", file=sys.stderr)
    return {"code": "timeout" if code is None else code, "seconds": f"{seconds:.1f}",
            "line": last[:120], "verdict": "OK" if not problems else "; ".join(problems),
            "short": run.short}


def descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def repo_state() -> str:
    digest = hashlib.sha256()
    for folder in ("dflash_lite", "notebooks"):
        for p in sorted((REPO / folder).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                digest.update(str(p).encode() + p.read_bytes())
    return digest.hexdigest()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="run the cases whose name holds one of these")
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    before = repo_state()
    root = Path(tempfile.mkdtemp(prefix="dflash-cases-"))
    rows, bad, index = [], 0, 0
    try:
        ctx = Ctx(root)
        for family, cases in all_cases():
            for case in cases:
                index += 1
                if args.only and not any(s.lower() in case.name.lower() for s in args.only):
                    continue
                result = run_case(ctx, case, index)
                bad += result["verdict"] != "OK"
                rows.append((family, case, result))
                print(f"[{index}] {case.name}: {result['verdict']} ({result['seconds']} s)",
                      file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            for p, dirs, files in os.walk(root):
                for name in dirs:
                    os.chmod(Path(p) / name, 0o755)
            shutil.rmtree(root, ignore_errors=True)
    after = repo_state()
    table = ["| # | case | command (short) | before (the issue, at 96346d4) | exit | time (s) "
             "| the last stderr line | verdict |", "|---|---|---|---|---|---|---|---|"]
    for n, (family, case, r) in enumerate(rows, 1):
        table.append(f"| {n} | {cell(case.name)} | `{cell(r['short'])}` | {cell(case.before)} "
                     f"| {r['code']} | {r['seconds']} | {cell(r['line'])} | {cell(r['verdict'])} |")
    text = "\n".join(table) + (
        f"\n\n{len(rows) - bad} of {len(rows)} OK. The repository's package and notebooks "
        f"{'are unchanged' if before == after else 'CHANGED during the run'}.\n")
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 1 if bad or before != after else 0


if __name__ == "__main__":
    sys.exit(main())
