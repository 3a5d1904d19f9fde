"""Where figures and results go, the course's figure style, and the figures of a benchmark report
(the JSON of :func:`dflash_lite.measuring.benchmark.bench`): :func:`plot_benchmark`, each figure
titled with the hardware it was measured on."""
from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

from ..checkout import ROOT
from ..files import atomic_path
from .report import DFLASH_KINDS, Kind, kind_of

FIGURES_ENV = "DFLASH_LITE_FIGURES"   # where notebooks save figures instead of the repo's figures/
RESULTS_ENV = "DFLASH_LITE_RESULTS"   # where notebooks write result JSON instead of results/
CACHE_ENV = "DFLASH_LITE_CACHE"       # where notebooks cache regenerated data (.cache/dflash_lite)


def repo_dir(start: str | Path | None = None) -> Path:
    """The repository root, found by walking up from ``start`` (the working directory by default);
    this package's checkout when the walk finds none; the working directory itself when the
    package is installed (so figures and results never go into site-packages)."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "dflash_lite").is_dir() and (folder / "notebooks").is_dir():
            return folder
    return ROOT if (ROOT / "notebooks").is_dir() else here


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


# Drawn FIGURE_WIDTH inches wide, saved at FIGURE_DPI, a figure shows at about its own pixel size
# in the site's column (docs/site/static/course.css) and JupyterLab: 9-point text stays 9 points.
FIGURE_WIDTH, FIGURE_DPI, MIN_FONT_SIZE = 7.0, 120, 9
# seaborn's "colorblind" palette (distinguishable with the common colour-vision deficiencies)
COLORBLIND = ("#0173B2", "#DE8F05", "#029E73", "#D55E00", "#CC78BC", "#CA9161", "#FBAFE4",
              "#949494", "#ECE133", "#56B4E9")
FIGURE_STYLE = {
    "figure.figsize": (FIGURE_WIDTH, 3.6), "figure.dpi": FIGURE_DPI, "savefig.dpi": FIGURE_DPI,
    "font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10, "figure.titlesize": 11,
    "figure.labelsize": 10, "xtick.labelsize": MIN_FONT_SIZE, "ytick.labelsize": MIN_FONT_SIZE,
    "legend.fontsize": MIN_FONT_SIZE, "legend.title_fontsize": MIN_FONT_SIZE,
}


def use_figure_style() -> None:
    """Set matplotlib's defaults to the course's figure style: a width that fits the column, fonts
    of at least MIN_FONT_SIZE points, and the colour-blind-safe palette as the colour cycle.
    Applied when this module is imported after matplotlib, and by :func:`subplots`."""
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update(FIGURE_STYLE)
    mpl.rcParams["axes.prop_cycle"] = cycler(color=list(COLORBLIND))


def subplots(*args, height: float = 3.6, width: float = FIGURE_WIDTH, **kwargs):
    """``plt.subplots`` in the course's style, ``width`` x ``height`` inches."""
    import matplotlib.pyplot as plt

    use_figure_style()
    return plt.subplots(*args, figsize=(width, height), **kwargs)


def describe(fig) -> str:
    """A figure's alt text: its title and its panels' titles and axis labels."""
    parts = [fig._suptitle.get_text()] if getattr(fig, "_suptitle", None) else []
    for ax in fig.axes:
        axis_labels = " against ".join(x for x in (ax.get_ylabel(), ax.get_xlabel()) if x)
        parts.append(": ".join(b for b in (ax.get_title(), axis_labels) if b))
    text = "; ".join(" ".join(p.split()) for p in parts if p)      # titles' line breaks as spaces
    return f"Figure: {text}" if text else "Figure"


def save_figure(fig, name: str, out_dir: str | Path | None = None, dpi: int = FIGURE_DPI) -> Path:
    """Save ``fig`` as ``name.png`` (in :func:`figures_dir` unless ``out_dir`` is given), show it
    inline when running in a notebook (its text form, the site's alt text, is
    :func:`describe`'s), then close it. The file is written whole or not at all."""
    import matplotlib.pyplot as plt

    out = Path(out_dir) if out_dir is not None else figures_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.tight_layout()
    with atomic_path(path) as tmp:
        # "tight": a legend placed below or beside the axes is saved too
        fig.savefig(tmp, dpi=dpi, format="png", bbox_inches="tight", pad_inches=0.1)
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    # inside a Jupyter kernel (get_ipython(): None outside IPython) the figure is shown inline
    if get_ipython is not None and type(get_ipython()).__name__ == "ZMQInteractiveShell":
        from IPython.display import display
        display({"image/png": base64.b64encode(path.read_bytes()).decode("ascii"),
                 "text/plain": describe(fig)}, raw=True)
    plt.close(fig)
    return path


def hardware_label(env: dict) -> str:
    """E.g. 'NVIDIA H200' or 'CPU AMD EPYC, 2 threads' (the CPU's model name where the report has
    it, as the chapters' clock prints it; older reports: the machine, 'x86_64')."""
    if env.get("gpu"):
        return env["gpu"]
    cpu = env.get("cpu") or env.get("machine", "")
    return f"CPU {cpu}, {env.get('threads', '?')} threads".replace("  ", " ")


def plot_benchmark(report: dict, out_dir: str | Path | None = None,
                   prefix: str = "bench") -> list[Path]:
    """Write ``{prefix}_speedup_by_method.png``, ``{prefix}_tau_histogram.png``,
    ``{prefix}_speedup_vs_block_size.png`` and, when the report has one, ``{prefix}_cost_model.png``
    (the four ``plot_benchmark_*`` functions below, one figure each); return the paths written."""
    plots = (plot_benchmark_speedup, plot_benchmark_histogram, plot_benchmark_block_sizes,
             plot_benchmark_cost_model)
    return [path for path in (plot(report, out_dir, prefix) for plot in plots) if path is not None]


def _measured(report: dict) -> list[dict]:
    """The methods that ran and have a speedup (an erroring method is left out of every figure)."""
    return [r for r in report["methods"] if r["error"] is None and r["speedup"] is not None]


def _where(report: dict) -> str:
    env = report["env"]
    prompts, tokens = env.get("prompts"), env.get("max_new_tokens")
    return f"{hardware_label(env)}; {prompts} prompts x {tokens} tokens"


DFLASH_BLUE, OTHER_GREY, TAU_ORANGE = COLORBLIND[0], COLORBLIND[7], COLORBLIND[1]
# the cost model's phases: one colour per phase, the model's bars solid, the measured ones hatched
PHASE_COLORS = {"verify": COLORBLIND[0], "draft": COLORBLIND[1], "accept": COLORBLIND[2]}


def plot_benchmark_speedup(report: dict, out_dir: str | Path | None = None,
                           prefix: str = "bench") -> Path:
    """``{prefix}_speedup_by_method.png``: a bar per method, DFlash's blue, with speedup and tau."""
    rows = _measured(report)
    fig, ax = subplots(height=0.3 * len(rows) + 1.3)
    colors = [DFLASH_BLUE if kind_of(r) in DFLASH_KINDS else OTHER_GREY for r in rows]
    ax.barh([r["name"] for r in rows], [r["speedup"] for r in rows], color=colors)
    ax.axvline(1.0, color="black", lw=0.8)
    for i, r in enumerate(rows):
        tau = f"  tau {r['tau']:.2f}" if r["tau"] is not None else ""
        ax.text(r["speedup"], i, f" {r['speedup']:.2f}x{tau}", va="center", fontsize=MIN_FONT_SIZE)
    ax.invert_yaxis()
    ax.set_xlabel("speedup over the autoregressive loop (same run)")
    ax.set_title(f"Speedup by method ({_where(report)})")
    ax.set_xlim(0, max(r["speedup"] for r in rows) * 1.45)
    return save_figure(fig, f"{prefix}_speedup_by_method", out_dir=out_dir)


def plot_benchmark_histogram(report: dict, out_dir: str | Path | None = None,
                             prefix: str = "bench") -> Path | None:
    """``{prefix}_tau_histogram.png``: one row per drafting method, one column per number of
    tokens a verify step committed (1, 2, ...), shaded by the fraction of the method's steps that
    committed it; each row's label gives tau (the mean, a white tick) and the number of steps."""
    import numpy as np

    drafting = [r for r in _measured(report)
                if r["tau_histogram"] and kind_of(r) is not Kind.AUTOREGRESSIVE]
    if not drafting:
        return None
    longest = max(len(r["tau_histogram"]) for r in drafting)
    shares = np.array([r["tau_histogram"] + [0] * (longest - len(r["tau_histogram"]))
                       for r in drafting], dtype=float)
    shares /= shares.sum(axis=1, keepdims=True)
    fig, ax = subplots(height=0.3 * len(drafting) + 1.6)
    image = ax.imshow(shares, aspect="auto", cmap="viridis", vmin=0, vmax=1,
                      extent=(0.5, longest + 0.5, len(drafting) - 0.5, -0.5))
    ax.set_yticks(range(len(drafting)), [f"{r['name']}: tau {r['tau']:.2f}, "
                                         f"{sum(r['tau_histogram'])} steps" for r in drafting])
    ax.set_xticks([1, *range(2, longest + 1, 1 if longest <= 8 else 2)])
    for i, r in enumerate(drafting):
        ax.plot([r["tau"]], [i], marker="|", color="white", markersize=12, mew=2)
    ax.set_xlabel("tokens committed per step\n(white tick: tau, the mean)")
    fig.colorbar(image, ax=ax, label="fraction of the method's steps", fraction=0.05)
    ax.set_title(f"Acceptance length\n({_where(report)})")
    return save_figure(fig, f"{prefix}_tau_histogram", out_dir=out_dir)


def plot_benchmark_block_sizes(report: dict, out_dir: str | Path | None = None,
                               prefix: str = "bench") -> Path | None:
    """``{prefix}_speedup_vs_block_size.png``: DFlash's speedup and tau at each fixed block size."""
    sweep = sorted((r for r in _measured(report) if kind_of(r) is Kind.DFLASH),
                   key=lambda r: r["block_size"])
    if not sweep:
        return None
    sizes = [r["block_size"] for r in sweep]
    fig, ax = subplots(height=3.6, width=5.5)
    speedup_line, = ax.plot(sizes, [r["speedup"] for r in sweep], "o-", color=DFLASH_BLUE,
                            label="speedup (left axis)")
    ax2 = ax.twinx()
    tau_line, = ax2.plot(sizes, [r["tau"] for r in sweep], "s--", color=TAU_ORANGE,
                         label="tau (right axis)")
    ax.set(xlabel="block size B", xticks=sizes)
    ax.set_ylabel("speedup", color=DFLASH_BLUE)
    ax2.set_ylabel("tau", color=TAU_ORANGE)
    ax.legend(handles=[speedup_line, tau_line], loc="upper center", bbox_to_anchor=(0.5, -0.2),
              ncol=2, frameon=False)
    ax.set_title(f"DFlash: speedup and tau by block size\n({hardware_label(report['env'])})")
    return save_figure(fig, f"{prefix}_speedup_vs_block_size", out_dir=out_dir)


def plot_benchmark_cost_model(report: dict, out_dir: str | Path | None = None,
                              prefix: str = "bench") -> Path | None:
    """``{prefix}_cost_model.png``: per step, the model's two forwards (solid) next to the
    measured phases (hatched), one colour per phase (top), and the predicted speedup next to the
    measured one (bottom); legends beside the axes, off the bars."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    cost = (report.get("cost_model") or {}).get("rows") or []
    if not cost:
        return None
    fig, (ax, bx) = subplots(2, 1, height=6.4)
    labels = [f"N={r['block_size'] - 1}" if kind_of(r) is Kind.DFLASH_TREE
              else f"B={r['block_size']}" for r in cost]
    x = range(len(cost))
    ms = lambda v: 1000 * v                                               # noqa: E731
    model = {"verify": [ms(r["t_target_b"]) for r in cost],
             "draft": [ms(r["t_draft_b"]) for r in cost]}
    measured = {phase: [ms(r["measured_per_step_s"].get(phase, 0.0)) for r in cost]
                for phase in PHASE_COLORS}
    for offset, bars, style in ((-0.2, model, {}),
                                (0.2, measured, {"hatch": "//", "edgecolor": "white"})):
        bottom = [0.0] * len(cost)
        for phase, vals in bars.items():
            ax.bar([i + offset for i in x], vals, 0.4, bottom=bottom, color=PHASE_COLORS[phase],
                   **style)
            bottom = [b + v for b, v in zip(bottom, vals)]
    ax.axhline(ms(cost[0]["t_target_1"]), color="black", lw=1, ls=":")
    ax.set(xticks=list(x), xticklabels=labels, ylabel="ms per step")
    handles = [Patch(color=PHASE_COLORS["verify"], label="verify: t_target(B)"),
               Patch(color=PHASE_COLORS["draft"], label="draft: t_draft(B)"),
               Patch(color=PHASE_COLORS["accept"], label="accept (measured only)"),
               Patch(facecolor="0.5", label="left bar: the model"),
               Patch(facecolor="0.5", hatch="//", edgecolor="white", label="right bar: measured"),
               Line2D([0], [0], color="black", ls=":", label="t_target(1)")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    ax.set_title("One step: the model (left bar) against the measured phases (right bar)")
    for offset, key, color in ((-0.2, "predicted", OTHER_GREY), (0.2, "measured", DFLASH_BLUE)):
        bx.bar([i + offset for i in x], [r[f"{key}_speedup"] for r in cost], 0.4, label=key,
               color=color)
    bx.set(xticks=list(x), xticklabels=labels, ylabel="speedup")
    bx.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    bx.set_title("Speedup: tau * t(1) / (t(B) + t_draft(B)) against measured")
    fig.suptitle(f"Cost model ({_where(report)})")
    return save_figure(fig, f"{prefix}_cost_model", out_dir=out_dir)


if "matplotlib" in sys.modules:          # a notebook that imported matplotlib first gets the style
    use_figure_style()
