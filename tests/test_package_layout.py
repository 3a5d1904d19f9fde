"""The package's shape: one decode loop, decoding modules that know nothing of the layers above
them, a table of contents that names every module, and lines of at most 100 columns."""
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dflash_lite

PACKAGE = Path(dflash_lite.__file__).parent
DECODING = ("target", "cache", "drafter", "variants", "acceptance", "shapes", "drafts", "proposers", "decode",
            "tree", "ngram", "baselines", "costs", "estimate", "choice", "policy", "engine", "timing")
ABOVE = {"benchmark", "harness", "methods", "report", "plotting", "diagrams", "cli", "course", "grader", "exercises"}


def package_imports(module: str) -> set[str]:
    """The package modules ``module`` imports (relative imports, first component), directly."""
    path = PACKAGE / f"{module}.py"
    if not path.exists():
        path = PACKAGE / module / "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dflash_lite."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("dflash_lite."))
    return found


def reachable(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for m in package_imports(todo.pop()) - seen:
            seen.add(m)
            todo.append(m)
    return seen


@pytest.mark.parametrize("module", DECODING)
def test_decoding_modules_import_nothing_from_the_layers_above(module):
    assert not reachable(module) & ABOVE, f"{module} reaches {sorted(reachable(module) & ABOVE)}"


def test_the_layer_check_sees_an_import():
    assert {"decode", "shapes", "cache"} <= reachable("tree") and "report" in reachable("benchmark")


def test_there_is_one_decode_loop():
    sources = [p.read_text() for p in PACKAGE.rglob("*.py")]
    assert sum(len(re.findall(r"^\s*def steps\(", s, re.M)) for s in sources) == 1


def test_the_loop_reads_as_its_phases_on_one_screen():
    """``steps`` without its docstring: at most 45 lines, and one statement per line (no ``;``)."""
    tree = ast.parse((PACKAGE / "decode.py").read_text())
    steps = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "steps")
    body = steps.body[1:] if isinstance(steps.body[0].value, ast.Constant) else steps.body
    lines = (PACKAGE / "decode.py").read_text().splitlines()[body[0].lineno - 1: steps.end_lineno]
    assert len(lines) <= 45 and not any(";" in line.split("#")[0] for line in lines), len(lines)


def test_the_table_of_contents_names_every_module():
    listed = set(re.findall(r":mod:`dflash_lite\.(\w+)`", dflash_lite.__doc__))
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    modules |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert listed == modules, (sorted(modules - listed), sorted(listed - modules))


def test_lines_are_at_most_100_columns():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -r requirements.txt)")
    root = PACKAGE.parent
    out = subprocess.run([ruff, "check", "--no-cache", "--select", "E501", "--line-length", "100",
                          "--output-format", "concise", str(PACKAGE), str(root / "tools")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:]


def test_no_module_is_over_450_lines():
    """One idea per module (issue 39): a module past 450 lines holds two."""
    long = {p.name: n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 450}
    assert long == {}, long
