"""Where figures and results go, and the figures of a benchmark report (the JSON of :func:`dflash_lite.benchmark.bench`).

:func:`plot_benchmark` writes four figures into :func:`figures_dir`, one function each: speedup by
method, the acceptance-length histograms (one panel per method), speedup and tau against block
size, and the cost-model decomposition. Every figure is titled with the hardware it was measured on.
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
    ``{prefix}_speedup_vs_block_size.png`` and, when the report has one, ``{prefix}_cost_model.png``
    (the four ``plot_benchmark_*`` functions below, one figure each); return the paths written."""
    paths = [plot_benchmark_speedup(report, out_dir, prefix), plot_benchmark_histogram(report, out_dir, prefix),
             plot_benchmark_block_sizes(report, out_dir, prefix), plot_benchmark_cost_model(report, out_dir, prefix)]
    return [path for path in paths if path is not None]


def _measured_rows(report: dict) -> list[dict]:
    """The methods that ran and have a speedup (an erroring method is left out of every figure)."""
    return [r for r in report["methods"] if r["error"] is None and r["speedup"] is not None]


def _where(report: dict) -> str:
    env = report["env"]
    return f"{hardware_label(env)}; {env.get('prompts')} prompts x {env.get('max_new_tokens')} tokens"


def _save(fig, out_dir: str | Path | None, prefix: str, name: str) -> Path:
    return save_figure(fig, f"{prefix}_{name}", out_dir=out_dir, dpi=110)


DFLASH_BLUE, OTHER_GREY, TAU_ORANGE = "#4C72B0", "#999999", "#DD8452"


def plot_benchmark_speedup(report: dict, out_dir: str | Path | None = None, prefix: str = "bench") -> Path:
    """``{prefix}_speedup_by_method.png``: one bar per method, DFlash's in blue, with speedup and tau."""
    import matplotlib.pyplot as plt


    rows = _measured_rows(report)
    fig, ax = plt.subplots(figsize=(7.5, 0.38 * len(rows) + 1.4))
    names = [r["name"] for r in rows]
    colors = [DFLASH_BLUE if kind_of(r) in DFLASH_KINDS else OTHER_GREY for r in rows]
    ax.barh(names, [r["speedup"] for r in rows], color=colors)
    ax.axvline(1.0, color="black", lw=0.8)
    for i, r in enumerate(rows):
        tau = f"  tau {r['tau']:.2f}" if r["tau"] is not None else ""
        ax.text(r["speedup"], i, f" {r['speedup']:.2f}x{tau}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speedup over the autoregressive loop (same run)")
    ax.set_title(f"Speedup by method ({_where(report)})", fontsize=9)
    ax.set_xlim(0, max(r["speedup"] for r in rows) * 1.35)
    return _save(fig, out_dir, prefix, "speedup_by_method")


def plot_benchmark_histogram(report: dict, out_dir: str | Path | None = None, prefix: str = "bench") -> Path | None:
    """``{prefix}_tau_histogram.png``: small multiples, one panel per drafting method (shared axes),
    the fraction of verify steps that committed 1, 2, ... tokens, with tau as a dashed line."""
    import matplotlib.pyplot as plt


    drafting = [r for r in _measured_rows(report) if r["tau_histogram"] and kind_of(r) is not Kind.AUTOREGRESSIVE]
    if not drafting:
        return None
    columns = min(3, len(drafting))
    lines = -(-len(drafting) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(2.3 * columns, 1.9 * lines + 0.7),
                             sharex=True, sharey=True, squeeze=False)
    longest = max(len(r["tau_histogram"]) for r in drafting)
    for ax, r in zip(axes.flat, drafting):
        hist = r["tau_histogram"]
        total = sum(hist)
        color = DFLASH_BLUE if kind_of(r) in DFLASH_KINDS else OTHER_GREY
        ax.bar(range(1, len(hist) + 1), [h / total for h in hist], width=0.85, color=color)
        ax.axvline(r["tau"], color=TAU_ORANGE, ls="--", lw=1.2)
        ax.set_title(f"{r['name']}\ntau {r['tau']:.2f}, {total} steps", fontsize=7.5)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(drafting):]:
        ax.set_visible(False)
    axes[0][0].set_xlim(0.3, longest + 0.7)
    fig.supxlabel("tokens committed per target forward (dashed: tau, the mean)", fontsize=8)
    fig.supylabel("fraction of steps", fontsize=8)
    fig.suptitle(f"Acceptance length ({_where(report)})", fontsize=9)
    return _save(fig, out_dir, prefix, "tau_histogram")


def plot_benchmark_block_sizes(report: dict, out_dir: str | Path | None = None, prefix: str = "bench") -> Path | None:
    """``{prefix}_speedup_vs_block_size.png``: DFlash at each fixed block size, speedup (left axis)
    and tau (right axis), one legend for both."""
    import matplotlib.pyplot as plt


    sweep = sorted((r for r in _measured_rows(report) if kind_of(r) is Kind.DFLASH), key=lambda r: r["block_size"])
    if not sweep:
        return None
    sizes = [r["block_size"] for r in sweep]
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    speedup_line, = ax.plot(sizes, [r["speedup"] for r in sweep], "o-", color=DFLASH_BLUE, label="speedup (left axis)")
    ax2 = ax.twinx()
    tau_line, = ax2.plot(sizes, [r["tau"] for r in sweep], "s--", color=TAU_ORANGE, label="tau (right axis)")
    ax.set_xlabel("block size B")
    ax.set_ylabel("speedup", color=DFLASH_BLUE)
    ax2.set_ylabel("tau", color=TAU_ORANGE)
    ax.set_xticks(sizes)
    ax.legend(handles=[speedup_line, tau_line], loc="lower right", fontsize=8)
    ax.set_title(f"DFlash: speedup and tau by block size ({hardware_label(report['env'])})", fontsize=9)
    return _save(fig, out_dir, prefix, "speedup_vs_block_size")


def plot_benchmark_cost_model(report: dict, out_dir: str | Path | None = None, prefix: str = "bench") -> Path | None:
    """``{prefix}_cost_model.png``: per step, the model's two forwards next to the measured phases
    (left), and the predicted speedup next to the measured one (right); legends below the bars."""
    import matplotlib.pyplot as plt


    cost = (report.get("cost_model") or {}).get("rows") or []
    if not cost:
        return None
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.9))
    labels = [f"N={r['block_size'] - 1}" if kind_of(r) is Kind.DFLASH_TREE else f"B={r['block_size']}" for r in cost]
    x = range(len(cost))
    ms = lambda v: 1000 * v                                               # noqa: E731
    ax.bar([i - 0.2 for i in x], [ms(r["t_target_b"]) for r in cost], 0.4, label="t_target(B)", color=DFLASH_BLUE)
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
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    ax.set_title("one step: model (left bar) vs measured (right bar)", fontsize=9)
    bx.bar([i - 0.2 for i in x], [r["predicted_speedup"] for r in cost], 0.4, label="predicted", color="#BBBBBB")
    bx.bar([i + 0.2 for i in x], [r["measured_speedup"] for r in cost], 0.4, label="measured", color=DFLASH_BLUE)
    bx.set_xticks(list(x), labels)
    bx.set_ylabel("speedup")
    bx.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    bx.set_title("tau * t(1) / (t(B) + t_draft(B)) vs measured", fontsize=9)
    fig.suptitle(f"Cost model ({_where(report)})", fontsize=9)
    return _save(fig, out_dir, prefix, "cost_model")
