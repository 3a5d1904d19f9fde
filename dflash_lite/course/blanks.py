"""What a student sees of a chapter: each solution region (``### BEGIN SOLUTION`` to ``### END
SOLUTION``) replaced by its :func:`stub`, and the markdown without the pointers to the worked
solutions; for the student edition and site (docs/teaching.md#what-students-get)."""
from __future__ import annotations

import ast
import re

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def _is_stub(region: str) -> bool:
    """Whether a solution region is already a blank: only ``x = None`` / ``return None`` lines."""
    try:
        tree = ast.parse("\n".join(line.strip() for line in region.splitlines()))
    except SyntaxError:
        return False
    for node in tree.body:
        value = getattr(node, "value", False)
        if not isinstance(node, (ast.Assign, ast.Return)) or value is None:
            continue
        parts = value.elts if isinstance(value, ast.Tuple) else [value]
        if not all(isinstance(v, ast.Constant) and v.value is None for v in parts):
            return False
    return bool(tree.body)


def stub(region: str, in_function: bool = False) -> str:
    """The blank a student sees for a solution region: the region's full-line comments (its
    hints), then, inside a function, ``raise NotImplementedError()``; at the top level, each
    name the region assigns set to None, with a shape comment kept, so the rest of the cell
    (and the demonstrations after it) still run, and only the check of this region fails."""
    if _is_stub(region):
        return region
    lines = region.splitlines()
    body = [line for line in lines if line.strip()]
    indent = re.match(r"\s*", body[0]).group(0) if body else ""
    out = [line for line in lines if line.strip().startswith("#")]
    if in_function:
        return "\n".join(out + [f"{indent}raise NotImplementedError()  # YOUR CODE HERE"])
    try:
        tree = ast.parse("\n".join(line[len(indent):] for line in lines))
    except SyntaxError:
        return "\n".join(out + ["raise NotImplementedError()  # YOUR CODE HERE"])
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            head = (f"def {node.name}({ast.unparse(node.args)}):"
                    if isinstance(node, ast.FunctionDef) else f"class {node.name}:")
            out += [indent + head, f"{indent}    raise NotImplementedError()  # YOUR CODE HERE"]
            continue
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        shape = re.search(r"#\s*(\([^)]*\))\s*$", lines[node.lineno - 1])
        kept = f" {shape.group(1)}" if shape else ""
        out += [f"{indent}{n.id} = None  # YOUR CODE HERE{kept}"
                for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)]
    return "\n".join(out or [f"{indent}pass  # YOUR CODE HERE"])


def blank(source: str) -> str:
    """A solution cell's source with every region replaced by its :func:`stub`."""
    def enclosed_by_def(start: int) -> bool:
        """Whether the region at ``start`` is in a function body."""
        first = source[start:].split("\n", 2)[1]       # the region's first line
        depth = len(first) - len(first.lstrip())
        for line in reversed(source[:start].splitlines()):
            if line.strip() and len(line) - len(line.lstrip()) < depth:
                return line.lstrip().startswith(("def ", "async def "))
        return False

    return re.sub(rf"^[ \t]*{BEGIN}\n(.*?)^[ \t]*{END}[ \t]*\n?",
                  lambda m: stub(m.group(1), enclosed_by_def(m.start())) + "\n", source,
                  flags=re.S | re.M)


def student_markdown(source: str) -> str:
    """Markdown for students: the pointers to the worked solutions taken out."""
    return re.sub(r"\s*[Ww]orked solutions:\s*`notebooks/" r"solutions/[^`]*`\.?", "", source)
