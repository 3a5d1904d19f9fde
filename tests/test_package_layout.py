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
# the layers, bottom up: a module may import its own layer, the ones below it and the base
LAYERS = ("decoding", "training", "measuring", "course")
BASE = {"validate", "files", "outputs", "signals", "checkout", "corpus", "prompts"}


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (``decoding.decode``; a package by its folder)."""
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


MODULES = module_names()


def package_imports(module: str) -> set[str]:
    """The package modules ``module`` imports directly, by dotted name (relative or absolute)."""
    path = MODULES[module]
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = here[: len(here) - node.level + 1]
            stem = base + (node.module.split(".") if node.module else [])
            candidates = [".".join(stem + [a.name]) for a in node.names] + [".".join(stem)]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dflash_lite."):
            stem = node.module.split(".")[1:]
            candidates = [".".join(stem + [a.name]) for a in node.names] + [".".join(stem)]
        elif isinstance(node, ast.Import):
            candidates = [a.name.split(".", 1)[1] for a in node.names
                          if a.name.startswith("dflash_lite.")]
        else:
            continue
        found.update(c for c in candidates if c in MODULES and c not in ("", module))
    return found


def reachable(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for m in package_imports(todo.pop()) - seen:
            seen.add(m)
            todo.append(m)
    return seen


def layer(module: str) -> int | None:
    """A module's layer (0 decoding .. 3 course), -1 for the base, None for the entry points."""
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else -1 if top in BASE else None


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer(m) is not None))
def test_every_module_imports_only_its_own_layer_and_the_ones_below(module):
    above = {m for m in reachable(module) if layer(m) is None or layer(m) > layer(module)}
    assert not above, f"{module} reaches {sorted(above)}"


def test_the_folders_are_the_layers_and_the_check_sees_an_import():
    assert {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()} == {
        *LAYERS, "exercises"}
    assert {"decoding.decode", "decoding.shapes", "decoding.cache"} <= reachable("decoding.tree")
    assert "measuring.report" in reachable("measuring.benchmark")
    assert "decoding.target" in reachable("course.grader")


def test_there_is_one_decode_loop():
    sources = [p.read_text() for p in PACKAGE.rglob("*.py")]
    assert sum(len(re.findall(r"^\s*def steps\(", s, re.M)) for s in sources) == 1


def test_the_loop_reads_as_its_phases_on_one_screen():
    """``steps`` without its docstring: at most 45 lines, and one statement per line (no ``;``)."""
    source = MODULES["decoding.decode"].read_text()
    tree = ast.parse(source)
    steps = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "steps")
    body = steps.body[1:] if isinstance(steps.body[0].value, ast.Constant) else steps.body
    lines = source.splitlines()[body[0].lineno - 1: steps.end_lineno]
    assert len(lines) <= 45 and not any(";" in line.split("#")[0] for line in lines), len(lines)


def test_the_table_of_contents_names_every_module():
    listed = set(re.findall(r":mod:`~?dflash_lite\.([\w.]+)`", dflash_lite.__doc__))
    modules = {m for m in MODULES if m not in ("",) + LAYERS and not m.startswith("exercises.")}
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
