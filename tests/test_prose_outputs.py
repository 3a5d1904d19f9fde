"""The notebooks' prose never types a number that a cell computes (issue 31, item 4).

Two checks over the committed notebooks, both quick:

* **No measured number in markdown.** A markdown cell may not write a measurement (a number
  followed by ms, us, s, tokens/s, x or %, a tau, or "thousands of times"): such a number is the
  output of some cell, and the prose must point at the output instead. The few numbers that are
  quoted, not measured (the paper's Table 1, the source article's claims, exercise targets), are
  listed in QUOTED with where they come from.
* **Qualitative claims hold for the committed outputs.** CLAIMS ties each sentence of the prose
  that states a relation ("orders of magnitude above its floor", "stays close to 1") to the output
  line it describes, and checks the relation on the printed numbers.
"""
import re
import statistics
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

MEASURED = re.compile(
    r"(?<![\w.$/=(-])(\d+(?:\.\d+)?)\s?(ms|us|µs|tokens/s|x|×|%|s)(?![\w/(])"   # 14.3 ms, 78%
    r"|\btau (?:of |about |= )?(\d+\.\d+)"                                      # tau 6.50
    r"|\b(?:hundreds|thousands|millions) of times\b", re.IGNORECASE)

# (notebook stem, the number as written) -> where it comes from. Quoted, not measured here.
QUOTED = {
    ("07_checking_the_source_article", "6x"): "the source article's headline claim",
    ("07_checking_the_source_article", "4.86x"): "the paper's Table 1, Qwen3-8B average",
    ("07_checking_the_source_article", "6.51x"): "the source article's claim at B = 8",
    ("07_checking_the_source_article", "7.72x"): "the source article's claim at B = 16",
    ("07_checking_the_source_article", "6.09x"): "the paper's Table 1, Qwen3-4B on MATH-500",
    ("07_checking_the_source_article", "6.08x"): "the paper's Table 1, Qwen3-8B on MATH-500",
    ("07_checking_the_source_article", "4.91x"): "the paper's Table 1, Qwen3-4B average",
    ("07_checking_the_source_article", "tau 6.49"): "the paper's Table 1, Qwen3-8B average tau",
    ("07_checking_the_source_article", "78%"): "the source article's acceptance claim at B = 8",
    ("07_checking_the_source_article", "65%"): "the source article's acceptance claim at B = 16",
    ("07_checking_the_source_article", "15%"): "the source article's assumed drafter cost",
    ("08_real_models", "5x"): "the paper's order of magnitude, quoted",
    ("08_real_models", "tau = 6.5"): "exercise 1's given, the paper's average for Qwen3-8B",
    ("10_gpu_benchmarks", "5x"): "exercise 2's target speedup, a given",
}
# notebook 11's split of a speedup: DFlash B=16's step-time ratio (speedup = steps x step time)
B16_STEP_TIME = r"DFlash B=16 +[\d.]+x = +[\d.]+ x +([\d.]+)"


def _cpu_step_time_below_the_h200s(split: str) -> bool:
    """DFlash B=16's step-time ratio: every CPU batch size's below every H200 batch size's."""
    h200, cpu = split.split("\ncpu ", 1)
    ratios = [[float(x) for x in re.findall(B16_STEP_TIME, part)] for part in (h200, cpu)]
    return all(ratios) and max(ratios[1]) < min(ratios[0])


def _each_speedup_lower_at_the_largest_batch(split: str) -> bool:
    """In the split of notebook 11 (an H200 block, then the CPU's): every method's speedup at its
    largest batch size below its speedup at batch 1."""
    lower = []
    for block in split.split("\ncpu ", 1):              # as _cpu_step_time_below_the_h200s
        speedups: dict[str, list[float]] = {}
        for name, speedup in re.findall(r"^ +\d+  (\S.*?) +([\d.]+)x =", block, re.MULTILINE):
            speedups.setdefault(name, []).append(float(speedup))
        lower += [v[-1] < v[0] for v in speedups.values()]
    return len(lower) >= 4 and all(lower)


# (notebook stem, a phrase of its markdown, a regex over its outputs with one number group per
# match, what the numbers must satisfy). A phrase that is no longer in the prose fails the test,
# so that the table is kept next to the prose it checks.
CLAIMS = [
    ("10_gpu_benchmarks", "the tiny target's takes orders of magnitude more",
     r"tiny target, fp32 .*?([\d.]+)x the floor", lambda v: min(v) >= 100),
    ("10_gpu_benchmarks", "The 8B-shaped one takes a multiple of it",
     r"Qwen3-8B shape, bf16 .*?([\d.]+)x the floor", lambda v: min(v) >= 2),
    ("10_gpu_benchmarks", "measured at widths up to 64 tokens, stays close to 1",
     r"H200, Qwen3-8B shape \(bf16\)\s+(?:t\(\d+\)/t\(1\)=[\d.]+\s*)*?t\(64\)/t\(1\)=([\d.]+)",
     lambda v: len(v) == 1 and v[0] < 1.5),
    ("10_gpu_benchmarks", "On this CPU the curve climbs",
     r"this machine \(cpu\), tiny target .*t\(64\)/t\(1\)=([\d.]+)", lambda v: v[0] > 1.5),
    ("06_benchmarks", "its verify costs more than a one-token forward",
     r"t_target\(B\)/t_target\(1\): ((?:B=\d+: [\d.]+(?:, )?)+)",
     lambda v: all(float(r) > 1 for r in re.findall(r"B=\d+: ([\d.]+)", v[0]))),
    ("11_batching_and_serving", "The per-row tau does not depend on the batch size",
     r"tau per-row ([\d.]+),", lambda v: len(v) > 1 and max(v) - min(v) < 1e-9),
    ("11_batching_and_serving", "The naive rule's tau falls as the batch grows",
     r"naive ([\d.]+) \(", lambda v: all(b <= a for a, b in zip(v, v[1:])) and v[-1] < v[0]),
    ("11_batching_and_serving", "stays well below w over the batch sizes measured",
     r"t\(b,16\)/t\(b,1\) +([\d.]+)", lambda v: max(v) < 8),
    ("11_batching_and_serving", "the ratio at the largest w is higher at the largest batch than",
     r"t\(b,16\)/t\(b,1\) +([\d.]+)", lambda v: v[-1] > v[0]),
    ("11_batching_and_serving", "the break-even tau is higher at the largest batch than at one",
     r"break-even tau +([\d.]+)", lambda v: v[-1] > v[0]),
    ("11_batching_and_serving",
     "its speedup over batched plain decoding is lower at the largest batch than at one request",
     r"best speculative .* ([\d.]+)x", lambda v: v[-1] < v[0]),
    ("11_batching_and_serving", "Where it predicts a gain it mostly sits above the measurement",
     r"DFlash B=\d+ +batch +\d+: predicted [\d.]+x, measured [\d.]+x \((\d+)% of it\)",
     lambda v: statistics.median(v) < 100),
    ("11_batching_and_serving", "What falls is the **steps ratio**",      # the H200 block, before the CPU's
     r"DFlash B=16 +[\d.]+x = +([\d.]+) x +[\d.]+\n(?=[\s\S]*\ncpu +batch)",
     lambda v: len(v) == 4 and v[0] > v[1] > v[2]),
    ("11_batching_and_serving", "The step-time ratio moves much less",
     B16_STEP_TIME + r"\n(?=[\s\S]*\ncpu +batch)",
     lambda v: len(v) == 4 and max(v) / min(v) < 1.5),
    ("11_batching_and_serving", "DFlash B=16's step-time ratio sits below the H200's at every",
     r"(H200 +batch[\s\S]*?\ncpu +batch[\s\S]*?)\n\n", lambda v: _cpu_step_time_below_the_h200s(v[0])),
    ("11_batching_and_serving", "From batch 1 to the largest batch they fall",
     r"(H200 +batch[\s\S]*?\ncpu +batch[\s\S]*?)\n\n",
     lambda v: _each_speedup_lower_at_the_largest_batch(v[0])),
    ("03_block_diffusion_drafter", "both drafters rarely get past the first positions",
     r"code\s+\S+\s+tau [\d.]+ over +\d+ steps; "
     r"share of steps with draft j accepted: 1: [\d.]+, 2: ([\d.]+)",
     lambda v: len(v) == 2 and max(v) < 0.25),
]


def markdown_cells(notebook: Path) -> list[str]:
    cells = jupytext.read(notebook.with_suffix(".py")).cells
    return [c.source for c in cells if c.cell_type == "markdown"]


def measured_numbers(markdown: str) -> list[str]:
    """The measurement-like numbers a markdown cell types, code spans and maths left out."""
    prose = re.sub(r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$", "", markdown, flags=re.S)
    return [m.group(0) for m in MEASURED.finditer(prose)]


def output_text(notebook: Path) -> str:
    nb = nbformat.read(notebook, as_version=4)
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", "") if out.output_type == "stream"
                         else out.get("data", {}).get("text/plain", ""))
    return "\n".join(texts)


def typed_numbers(stem: str, cells: list[str]) -> list[str]:
    return [n for md in cells for n in measured_numbers(md) if (stem, n) not in QUOTED]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_types_no_measured_number(notebook):
    typed = typed_numbers(notebook.stem, markdown_cells(notebook))
    assert not typed, (f"{notebook.name}: markdown types {typed}; refer to the output that "
                       "prints it, or list a quoted constant in QUOTED with its source")


def test_quoted_numbers_are_still_quoted():
    """Each entry of QUOTED is still in its notebook's prose (no stale exceptions)."""
    for stem, number in QUOTED:
        cells = markdown_cells(ROOT / "notebooks" / f"{stem}.ipynb")
        assert any(number in measured_numbers(md) for md in cells), (stem, number)


@pytest.mark.parametrize("stem, phrase, pattern, holds", CLAIMS,
                         ids=[f"{c[0][:2]}-{c[1][:24]}" for c in CLAIMS])
def test_qualitative_claim_holds_for_the_committed_outputs(stem, phrase, pattern, holds):
    notebook = ROOT / "notebooks" / f"{stem}.ipynb"
    prose = " ".join(" ".join(md.split()) for md in markdown_cells(notebook))
    assert phrase in prose, f"{stem}: the prose no longer says {phrase!r}: update CLAIMS"
    values = re.findall(pattern, output_text(notebook))
    assert values, f"{stem}: no output matches {pattern!r}"
    numbers = [v if "B=" in v else float(v) for v in values]
    assert holds(numbers), f"{stem}: {phrase!r} does not hold for the printed {values}"


def test_the_scan_catches_a_typed_measurement():
    """The check can fail: issue 31's mismatches, typed into prose, are caught."""
    for prose in ("cell 8 gives t(1) = 14.3 ms", "a 2.74x speedup", "tau 6.50 on math",
                  "the tiny target is thousands of times above it", "it reached 249.4 tokens/s",
                  "input fusion costs 350 ms per draft"):
        assert typed_numbers("01_autoregressive_bottleneck", [prose]), prose
    for prose in ("B = 16 and N = 32", "notebook 06", "the output `t(1) = 14.3 ms`", "$t = 1$"):
        assert not typed_numbers("01_autoregressive_bottleneck", [prose]), prose


def test_a_false_claim_fails():
    """A claim checked against numbers that contradict it is reported."""
    _, _, pattern, holds = CLAIMS[0]
    values = re.findall(pattern, "tiny target, fp32      floor    0.006 ms, measured t(1) on the "
                                 "H200    0.05 ms:     8.3x the floor")
    assert values and not holds([float(v) for v in values])
