"""Code prompts no one here wrote and no drafter here trained on: functions of installed
third-party packages, each as its signature and docstring (as HumanEval poses a task), written as
JSONL for ``bench --prompts``.

    python tools/package_prompts.py --out /tmp/package_prompts.jsonl --num 8
    python -m dflash_lite bench --prompts /tmp/package_prompts.jsonl --batch-sizes 1,4,8 ...

The functions come from the packages named in ``--packages`` that are installed (the ones missing
are skipped and named), in a seeded shuffle, so that the same environment gives the same set.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import random
import sys
from pathlib import Path

PACKAGES = ("jinja2", "packaging", "tqdm", "nbformat", "pygments", "yaml", "markdown_it")


def functions(package: str) -> list[str]:
    """Every top-level function of ``package``'s modules with a docstring, as the text of its
    signature line(s) and docstring."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    prompts = []
    for path in sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.py")):
        source = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        lines = source.splitlines()
        for node in tree.body:
            doc = isinstance(node, ast.FunctionDef) and ast.get_docstring(node)
            if not doc or node.name.startswith("_") or not 40 <= len(doc) <= 600:
                continue
            body = node.body[0]                  # the docstring's expression
            text = "\n".join(lines[node.lineno - 1: body.end_lineno]) + "\n"
            if node.decorator_list or "\t" in text:
                continue
            prompts.append(text)
    return prompts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the JSONL file to write (must not exist)")
    parser.add_argument("--num", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--packages", nargs="+", default=list(PACKAGES))
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.exists():
        print(f"package_prompts: {out} exists; name a new file", file=sys.stderr)
        return 2
    found = {p: functions(p) for p in args.packages}
    missing = [p for p, f in found.items() if not f]
    pool = sorted(f for fs in found.values() for f in fs)
    if len(pool) < args.num:
        print(f"package_prompts: {len(pool)} functions found, {args.num} asked", file=sys.stderr)
        return 2
    chosen = random.Random(args.seed).sample(pool, args.num)
    out.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in chosen), encoding="utf-8")
    print(f"{args.num} functions from {len(pool)} in "
          f"{', '.join(p for p in args.packages if p not in missing)} -> {out}"
          + (f" (not installed: {', '.join(missing)})" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
