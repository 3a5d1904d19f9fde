"""The same drafter served by vLLM: export it, decode the same token ids in vLLM (offline, CPU) and
in this project's loop, and compare greedy tokens, tau and tokens/s (issue 38, README "Serve it with
vLLM").

    bash tools/vllm_venv.sh                      # once: vLLM's CPU build in its own venv
    export DFLASH_VLLM_PYTHON=~/.cache/dflash-lite/vllm-venv/bin/python
    python tools/vllm_check.py --out results/vllm

The vLLM side is tools/vllm_worker.py, a subprocess in vLLM's venv that takes one JSON request a
line and answers one JSON line. Per dtype and method (plain decoding, DFlash with 15 speculative
tokens = our block size 16) one vLLM engine is started, both sides decode every prompt once
(warm-up; these outputs are compared), then ``repeats`` timed rounds, each round every batch size
on both sides back to back, the side that goes first alternating; medians are reported.

Comparable on purpose: the same token ids, grouped into the same batches; greedy; the same stop
ids (vLLM skips its tokenizer, so ``stop_token_ids``); the same ``max_new_tokens``; both sides (the
vLLM worker with its engine process, and this process) pinned to the same one core, one thread
(``VLLM_CPU_OMP_THREADS_BIND`` = that core, ``torch.set_num_threads(1)``). One difference stays:
vLLM always drafts 15 tokens, while this loop drafts at most the budget left
(``min(B, remaining) - 1``), which can only change tau in a request's last step.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dflash_lite import corpus  # noqa: E402
from dflash_lite.decoding.baselines import NoDraftProposer  # noqa: E402
from dflash_lite.measuring.batching import batches_of  # noqa: E402
from dflash_lite.decoding.checkpoints import export_dflash, load_drafter  # noqa: E402
from dflash_lite.decoding.decode import DFlashProposer, generate  # noqa: E402
from dflash_lite.prompts import encode_all  # noqa: E402
from dflash_lite.decoding.target import (default_drafter_path, load_pretrained, parse_dtype,  # noqa: E402
                                _resolve, stop_token_ids)

WORKER = Path(__file__).resolve().parent / "vllm_worker.py"
ENV_PYTHON = "DFLASH_VLLM_PYTHON"
DTYPES = ("float32", "bfloat16")
METHODS = ("plain", "dflash")
BLOCK_SIZE = 16                         # ours: the block; vLLM: 15 speculative tokens after it


class CheckError(RuntimeError):
    """A one-line reason the check cannot run."""


def vllm_python(given: str | None = None) -> str:
    """The vLLM venv's interpreter: ``given``, else $DFLASH_VLLM_PYTHON; one line when neither."""
    path = given or os.environ.get(ENV_PYTHON)
    if not path:
        raise CheckError(f"no vLLM interpreter: set {ENV_PYTHON} to the python of "
                         "tools/vllm_venv.sh's venv, or pass --vllm-python")
    if not Path(path).is_file() or not os.access(path, os.X_OK):
        raise CheckError(f"{path}: not an executable python ({ENV_PYTHON} or --vllm-python)")
    return path


def pin(core: int) -> None:
    """This process (and the vLLM worker it starts) on one core, one torch thread."""
    if core not in os.sched_getaffinity(0) and core not in range(os.cpu_count() or 1):
        raise CheckError(f"core {core}: this machine has cores 0..{(os.cpu_count() or 1) - 1}")
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)


class Worker:
    """tools/vllm_worker.py in the vLLM venv: one JSON line out, one JSON line back."""

    def __init__(self, python: str, core: int, log):
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
               "VLLM_CPU_OMP_THREADS_BIND": str(core), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
               "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
               "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        env.pop("PYTHONPATH", None)
        # its own process group: the worker, vLLM's engine-core and worker processes
        self.process = subprocess.Popen([python, str(WORKER)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                                        cwd=tempfile.gettempdir(), start_new_session=True)
        self.paused = False

    def pause(self) -> None:
        """Stop vLLM's processes while our loop is timed: idle, its executor's worker polls its
        message queue (about a tenth of a core), which would run on our core."""
        os.killpg(self.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            os.killpg(self.process.pid, signal.SIGCONT)
            self.paused = False

    def ask(self, **request) -> dict:
        self.resume()
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise CheckError(f"the vLLM worker ended (exit {self.process.wait()}); its log has why")
        got = json.loads(line)
        if "error" in got:
            raise CheckError(f"vLLM: {got['error']}")
        return got

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.ask(op="stop")
            except (CheckError, OSError, ValueError):
                pass
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        try:                                     # anything of vLLM's left in its group
            os.killpg(self.process.pid, signal.SIGCONT)
            time.sleep(1)
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.resume()
        self.close()


def check_prompts(tokenizer, num_math: int, num_code: int) -> tuple[list[list[int]], list[str]]:
    """Token ids of the built-in held-out prompts (math first), and their domains."""
    texts = corpus.prompts("held_out", "math", num_math) if num_math else []
    code = corpus.prompts("held_out", "code", num_code) if num_code else []
    ids = encode_all(tokenizer, texts + code)
    return [x[0].tolist() for x in ids], ["math"] * len(texts) + ["code"] * len(code)


def export(drafter_path, dtype: str, directory: Path) -> Path:
    """The drafter written in the public DFlash layout, in ``dtype``."""
    return export_dflash(load_drafter(drafter_path), directory, parse_dtype(dtype))


def ours(target, drafter, groups, max_new_tokens: int, stops) -> dict:
    """Our loop on the same groups as vLLM's calls: tokens per prompt, tau, seconds."""
    tokens, lengths, t0 = [], [], time.perf_counter()
    for group in groups:
        batch = [torch.tensor([ids]) for ids in group]
        proposer = (NoDraftProposer() if drafter is None
                    else DFlashProposer(drafter, target, BLOCK_SIZE))
        for result in generate(target, proposer, batch, max_new_tokens, stop_token_ids=stops):
            tokens.append(result.tokens)
            lengths += result.acceptance_lengths
    return {"tokens": tokens, "seconds": time.perf_counter() - t0, "steps": len(lengths),
            "tau": sum(lengths) / len(lengths) if drafter is not None and lengths else None}


def kept_per_step(tokens: list[list[int]], steps: int) -> float | None:
    """New tokens kept per verify step (prefill's token left out), the same count on both sides:
    tau as each engine counts it also holds tokens accepted past a stop or the budget, which vLLM,
    always drafting 15, accepts more of."""
    return (sum(map(len, tokens)) - len(tokens)) / steps if steps else None


def tau_of(answer: dict) -> float | None:
    """vLLM's tau: 1 + accepted / drafts (tokens per target forward, the bonus token included)."""
    return 1 + answer["accepted"] / answer["drafts"] if answer.get("drafts") else None


def compare(python: str, target_name: str, drafter_path, dtype: str, methods, batch_sizes,
            ids: list[list[int]], max_new_tokens: int, repeats: int, core: int, workdir: Path,
            log, progress=print) -> dict:
    """Every method at every batch size in ``dtype``, ours against vLLM: the rows of a result
    file, and what the vLLM engines reported at start."""
    torch_dtype = parse_dtype(dtype)
    target, tokenizer = load_pretrained(target_name, dtype=torch_dtype)
    target_dir = _resolve(target_name)
    stops = stop_token_ids(target, tokenizer)
    exported = export(drafter_path, dtype, workdir / f"dflash-{dtype}")
    drafter = load_drafter(exported, dtype=torch_dtype)
    rows, engines = [], {}
    for method in methods:
        speculative = {"method": "dflash", "model": str(exported),
                       "num_speculative_tokens": BLOCK_SIZE - 1} if method == "dflash" else None
        draft = drafter if method == "dflash" else None
        with Worker(python, core, log) as worker:
            engines[method] = worker.ask(op="start", model=str(target_dir),
                                         speculative_config=speculative, dtype=dtype,
                                         max_num_seqs=max(batch_sizes),
                                         max_model_len=target.config.max_position_embeddings)
            groups = {b: batches_of(ids, b) for b in batch_sizes}
            first = {}
            for b in batch_sizes:                             # warm-up: these outputs compared
                worker.pause()
                mine = ours(target, draft, groups[b], max_new_tokens, stops)
                first[b] = (mine, worker.ask(op="generate", groups=groups[b],
                                             max_new_tokens=max_new_tokens, stop_token_ids=stops))
            seconds = {b: {"ours": [], "vllm": []} for b in batch_sizes}
            loads = [os.getloadavg()[0]]
            for r in range(repeats):
                for b in batch_sizes:
                    sides = ["ours", "vllm"] if r % 2 == 0 else ["vllm", "ours"]
                    for side in sides:
                        if side == "ours":
                            worker.pause()
                            got = ours(target, draft, groups[b], max_new_tokens, stops)
                        else:
                            got = worker.ask(op="generate", groups=groups[b],
                                             max_new_tokens=max_new_tokens, stop_token_ids=stops)
                        seconds[b][side].append(got["seconds"])
                loads.append(os.getloadavg()[0])
        for b in batch_sizes:
            mine, theirs = first[b]
            n = len(ids)
            tokens_ours = sum(map(len, mine["tokens"][:n]))
            rounds = len(mine["tokens"]) // n            # a batch larger than the list repeats it
            same = [a == c for a, c in zip(mine["tokens"], theirs["tokens"])]
            per_s_ours = per_s_vllm = None                # repeats=0: the check, untimed
            if repeats:
                per_s_ours = rounds * tokens_ours / statistics.median(seconds[b]["ours"])
                per_s_vllm = sum(map(len, theirs["tokens"])) / statistics.median(
                    seconds[b]["vllm"])
            row = {"method": method, "batch_size": b, "dtype": dtype,
                   "identical": all(same) and len(mine["tokens"]) == len(theirs["tokens"]),
                   "identical_prompts": sum(same[:n]), "prompts": n,
                   "first_difference": _first_difference(mine["tokens"], theirs["tokens"]),
                   "tau_ours": mine["tau"], "tau_vllm": tau_of(theirs),
                   "vllm_drafts": theirs["drafts"], "vllm_accepted": theirs["accepted"],
                   "vllm_accepted_per_position": theirs["per_position"],
                   "new_tokens_ours": rounds * tokens_ours,
                   "new_tokens_vllm": sum(map(len, theirs["tokens"])),
                   "tokens_per_s_ours": per_s_ours, "tokens_per_s_vllm": per_s_vllm,
                   "ours_vs_vllm": per_s_ours / per_s_vllm if repeats else None,
                   "seconds_ours": seconds[b]["ours"], "seconds_vllm": seconds[b]["vllm"],
                   "load_average_1min": {"min": min(loads), "max": max(loads),
                                         "median": statistics.median(loads)}}
            if row["tau_ours"] and row["tau_vllm"]:
                row["tau_gap"] = row["tau_vllm"] / row["tau_ours"] - 1
                row["steps_ours"] = mine["steps"]
                row["kept_per_step_ours"] = kept_per_step(mine["tokens"], mine["steps"])
                row["kept_per_step_vllm"] = kept_per_step(theirs["tokens"], theirs["drafts"])
                row["kept_gap"] = row["kept_per_step_vllm"] / row["kept_per_step_ours"] - 1
            rows.append(row)
            if progress:
                tau = (f", tau {row['tau_ours']:.3f} vs {row['tau_vllm']:.3f}"
                       if row["tau_ours"] else "")
                speed = (f", {per_s_ours:.1f} vs {per_s_vllm:.1f} tok/s "
                         f"({row['ours_vs_vllm']:.2f}x)" if repeats else "")
                progress(f"{dtype} {method} batch {b}: identical {row['identical_prompts']}/{n}"
                         f"{tau}{speed}")
    return {"rows": rows, "engines": engines}


def _first_difference(a: list[list[int]], b: list[list[int]]) -> dict | None:
    """Where the first differing prompt's outputs part (None: none differ)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            at = next((j for j, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            return {"prompt": i, "position": at, "ours": x[at: at + 4], "vllm": y[at: at + 4]}
    return None


def environment(core: int, python: str) -> dict:
    versions = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version("
                               "'vllm-cpu'), m.version('torch'), m.version('transformers'))"],
                              capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    v = versions.stdout.split() or ["?", "?", "?"]
    return {"ours": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version(), "threads": torch.get_num_threads(),
                     "cores": sorted(os.sched_getaffinity(0))},
            "vllm": {"vllm_cpu": v[0], "torch": v[1], "transformers": v[2],
                     "VLLM_CPU_OMP_THREADS_BIND": str(core), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
                     "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
                     "cores": [core], "enforce_eager": True, "enable_prefix_caching": False,
                     "paused_while_ours_runs": True},
            "machine": {"cpu_count": os.cpu_count(), "processor": platform.processor() or None,
                        "load_average_at_start": list(os.getloadavg())}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-python", help=f"the vLLM venv's python (default ${ENV_PYTHON})")
    p.add_argument("--target", default="tiny")
    p.add_argument("--drafter", help="a drafter directory (default: the target's shipped one)")
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4, 16])
    p.add_argument("--num-math", type=int, default=8)
    p.add_argument("--num-code", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3, help="timed rounds (0: check only)")
    p.add_argument("--core", type=int, default=0, help="the one core both sides run on")
    p.add_argument("--out", help="a directory for one JSON file per dtype (default: print)")
    p.add_argument("--log", help="vLLM's log (default: a temporary file, named on failure)")
    a = p.parse_args(argv)
    try:
        for name in ("num_math", "num_code", "max_new_tokens", "repeats"):
            if getattr(a, name) < (1 if name == "max_new_tokens" else 0):
                raise CheckError(f"--{name.replace('_', '-')} must not be below "
                                 f"{1 if name == 'max_new_tokens' else 0}, "
                                 f"got {getattr(a, name)}")
        if any(b < 1 for b in a.batch_sizes) or a.num_math + a.num_code < 1:
            raise CheckError("--batch-sizes must be positive and there must be a prompt")
        python = vllm_python(a.vllm_python)
        pin(a.core)
        drafter = a.drafter or default_drafter_path(a.target)
        if drafter is None:
            raise CheckError(f"{a.target}: has no shipped drafter; pass --drafter")
        started = time.perf_counter()
        env = environment(a.core, python)
        target, tokenizer = load_pretrained(a.target)
        stops = stop_token_ids(target, tokenizer)
        ids, domains = check_prompts(tokenizer, a.num_math, a.num_code)
        log_path = Path(a.log) if a.log else Path(tempfile.mkstemp(suffix="-vllm.log")[1])
        files = {}
        with tempfile.TemporaryDirectory() as work, open(log_path, "w") as log:
            for dtype in a.dtypes:
                got = compare(python, a.target, drafter, dtype, a.methods, a.batch_sizes, ids,
                              a.max_new_tokens, a.repeats, a.core, Path(work), log)
                files[dtype] = {
                    "target": a.target, "drafter": _shown(drafter),
                    "prompts": {"source": "built-in held-out (dflash_lite.corpus)",
                                "math": domains.count("math"), "code": domains.count("code")},
                    "max_new_tokens": a.max_new_tokens, "stop_token_ids": stops,
                    "repeats": a.repeats, "block_size": BLOCK_SIZE,
                    "num_speculative_tokens": BLOCK_SIZE - 1,
                    "draft_length_rule": {"ours": "min(16, tokens left) - 1 drafted",
                                          "vllm": "always 15 drafted"},
                    "env": {**env, "vllm_engines": got["engines"],
                            "load_average_at_end": list(os.getloadavg())},
                    "rows": got["rows"]}
        total = time.perf_counter() - started
        for data in files.values():
            data["env"]["script_seconds"] = total
        if a.out:
            out = Path(a.out)
            out.mkdir(parents=True, exist_ok=True)
            for dtype, data in files.items():
                name = f"{Path(str(a.target)).name}_{dtype}.json"
                (out / name).write_text(json.dumps(data, indent=1) + "\n")
                print(f"wrote {out / name}")
        else:
            print(json.dumps(files, indent=1))
        print(f"total {total:.0f} s; vLLM's log: {log_path}")
        if not a.log:
            os.unlink(log_path)
    except CheckError as e:
        print(f"vllm_check: {e}", file=sys.stderr)
        return 2
    return 0


def _shown(path) -> str:
    """A path inside this checkout as a relative one, so a result never records where it ran."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
