"""Where figures and results go, and the figures of a benchmark report (the JSON of :func:`dflash_lite.benchmark.bench`).

:func:`plot_benchmark` writes four figures into :func:`figures_dir`: speedup by
method, the acceptance-length histogram, speedup against block size, and the cost-model
decomposition. Every figure is titled with the hardware it was measured on.
"""
from __future__ import annotations

import os
from pathlib import Path

from .files import atomic_path
from .report import DFLASH_KINDS, Kind, kind_of

ROOT = Path(__file__).resolve().parent.parent

FIGURES_ENV = "DFLASH_LITE_FIGURES"   # where notebooks save figures instead of the repository's figures/
RESULTS_ENV = "DFLASH_LITE_RESULTS"   # where notebooks write result JSON instead of results/
CACHE_ENV = "DFLASH_LITE_CACHE"       # where notebooks cache regenerated data instead of .cache/dflash_lite


def repo_dir(start: str | Path | None = None) -> Path:
    """The repository root, found by walking up from ``start`` (the working directory by default);
    this package's checkout when the walk finds none."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "dflash_lite").is_dir() and (folder / "notebooks").is_dir():
            return folder
    return ROOT


def _output_dir(env: str, name: str, start: str | Path | None) -> Path:
    path = Path(os.environ[env]) if os.environ.get(env) else repo_dir(start) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def figures_dir(start: str | Path | None = None) -> Path:
    """Where figures are saved: ``$DFLASH_LITE_FIGURES`` when set (the tests point it at a temporary
    directory), else the repository's ``figures/``. Created if missing."""
    return _output_dir(FIGURES_ENV, "figures", start)


def results_dir(start: str | Path | None = None) -> Path:
    """Where result JSON is written: ``$DFLASH_LITE_RESULTS`` when set, else the repository's
    ``results/``. Committed inputs (ablation tables, training curves) are read from
    ``repo_dir() / "results"``, never from here."""
    return _output_dir(RESULTS_ENV, "results", start)


def cache_dir(start: str | Path | None = None) -> Path:
    """Where regenerated training data is cached: ``$DFLASH_LITE_CACHE`` when set, else the
    repository's ``.cache/dflash_lite`` (ignored by git)."""
    return _output_dir(CACHE_ENV, ".cache/dflash_lite", start)


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where a figure can be shown inline)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"


def save_figure(fig, name: str, out_dir: str | Path | None = None, dpi: int = 120) -> Path:
    """Save ``fig`` as ``name.png`` (in :func:`figures_dir` unless ``out_dir`` is given), show it
    inline when running in a notebook, then close it. The file is written whole or not at all."""
    import matplotlib.pyplot as plt

    out = Path(out_dir) if out_dir is not None else figures_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    if in_notebook():
        from IPython.display import display
        display(fig)
    plt.close(fig)
    return path


def hardware_label(env: dict) -> str:
    """E.g. 'NVIDIA H200' or 'CPU x86_64, 2 threads'."""
    if env.get("gpu"):
        return env["gpu"]
    return f"CPU {env.get('machine', '')}, {env.get('threads', '?')} threads".replace("  ", " ")


def plot_benchmark(report: dict, out_dir: str | Path | None = None, prefix: str = "bench") -> list[Path]:
    """Write ``{prefix}_speedup_by_method.png``, ``{prefix}_tau_histogram.png``,
    ``{prefix}_speedup_vs_block_size.png`` and, when the report has one, ``{prefix}_cost_model.png``."""
    import matplotlib.pyplot as plt
    import seaborn as sns


    out = Path(out_dir) if out_dir is not None else figures_dir()
    out.mkdir(parents=True, exist_ok=True)
    env = report["env"]
    where = f"{hardware_label(env)}; {env.get('prompts')} prompts x {env.get('max_new_tokens')} tokens"
    rows = [r for r in report["methods"] if r["error"] is None and r["speedup"] is not None]
    paths = []

    def save(fig, name):
        paths.append(save_figure(fig, f"{prefix}_{name}", out_dir=out, dpi=110))

    # 1. speedup by method
    fig, ax = plt.subplots(figsize=(7.5, 0.38 * len(rows) + 1.4))
    names = [r["name"] for r in rows]
    colors = ["#4C72B0" if kind_of(r) in DFLASH_KINDS else "#999999" for r in rows]
    ax.barh(names, [r["speedup"] for r in rows], color=colors)
    ax.axvline(1.0, color="black", lw=0.8)
    for i, r in enumerate(rows):
        tau = f"  tau {r['tau']:.2f}" if r["tau"] is not None else ""
        ax.text(r["speedup"], i, f" {r['speedup']:.2f}x{tau}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speedup over the autoregressive loop (same run)")
    ax.set_title(f"Speedup by method ({where})", fontsize=9)
    ax.set_xlim(0, max(r["speedup"] for r in rows) * 1.35)
    save(fig, "speedup_by_method")

    # 2. acceptance-length histogram of every drafting method
    drafting = [r for r in rows if r["tau_histogram"]]
    if drafting:
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        palette = sns.color_palette("tab10", len(drafting))
        width = 0.8 / len(drafting)
        for j, r in enumerate(drafting):
            hist = r["tau_histogram"]
            total = sum(hist)
            ax.bar([i + 1 + (j - len(drafting) / 2 + 0.5) * width for i in range(len(hist))],
                   [h / total for h in hist], width=width, color=palette[j], label=f"{r['name']} (tau {r['tau']:.2f})")
        ax.set_xlabel("tokens committed per target forward")
        ax.set_ylabel("fraction of steps")
        ax.legend(fontsize=7)
        ax.set_title(f"Acceptance length ({where})", fontsize=9)
        save(fig, "tau_histogram")

    # 3. speedup against block size (DFlash here, fixed sizes)
    sweep = sorted((r for r in rows if kind_of(r) is Kind.DFLASH), key=lambda r: r["block_size"])
    if sweep:
        fig, ax = plt.subplots(figsize=(5.5, 3.4))
        ax.plot([r["block_size"] for r in sweep], [r["speedup"] for r in sweep], "o-", label="speedup")
        ax2 = ax.twinx()
        ax2.plot([r["block_size"] for r in sweep], [r["tau"] for r in sweep], "s--", color="#DD8452", label="tau")
        ax.set_xlabel("block size B")
        ax.set_ylabel("speedup")
        ax2.set_ylabel("tau", color="#DD8452")
        ax.set_xticks([r["block_size"] for r in sweep])
        ax.set_title(f"DFlash: speedup and tau by block size ({hardware_label(env)})", fontsize=9)
        save(fig, "speedup_vs_block_size")

    # 4. cost model: predicted step (verify + draft forwards) against the measured step
    cost = (report.get("cost_model") or {}).get("rows") or []
    if cost:
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.4))
        labels = [f"N={r['block_size'] - 1}" if kind_of(r) is Kind.DFLASH_TREE else f"B={r['block_size']}" for r in cost]
        x = range(len(cost))
        ms = lambda v: 1000 * v                                               # noqa: E731
        ax.bar([i - 0.2 for i in x], [ms(r["t_target_b"]) for r in cost], 0.4, label="t_target(B)", color="#4C72B0")
        ax.bar([i - 0.2 for i in x], [ms(r["t_draft_b"]) for r in cost], 0.4,
               bottom=[ms(r["t_target_b"]) for r in cost], label="t_draft(B)", color="#55A868")
        bottom = [0.0] * len(cost)
        for phase, color in (("verify", "#8DA0CB"), ("draft", "#A6D854"), ("accept", "#FC8D62")):
            vals = [ms(r["measured_per_step_s"].get(phase, 0.0)) for r in cost]
            ax.bar([i + 0.2 for i in x], vals, 0.4, bottom=bottom, color=color, label=f"measured {phase}")
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.axhline(ms(cost[0]["t_target_1"]), color="black", lw=0.8, ls=":", label="t_target(1)")
        ax.set_xticks(list(x), labels)
        ax.set_ylabel("ms per step")
        ax.legend(fontsize=6)
        ax.set_title("one step: model (left) vs measured (right)", fontsize=9)
        bx.bar([i - 0.2 for i in x], [r["predicted_speedup"] for r in cost], 0.4, label="predicted", color="#BBBBBB")
        bx.bar([i + 0.2 for i in x], [r["measured_speedup"] for r in cost], 0.4, label="measured", color="#4C72B0")
        bx.set_xticks(list(x), labels)
        bx.set_ylabel("speedup")
        bx.legend(fontsize=7)
        bx.set_title("tau * t(1) / (t(B) + t_draft(B)) vs measured", fontsize=9)
        fig.suptitle(f"Cost model ({where})", fontsize=9)
        save(fig, "cost_model")
    return paths
