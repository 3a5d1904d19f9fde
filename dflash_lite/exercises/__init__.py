"""Self-checks for the notebooks' exercises, one module per chapter (``ch02`` for notebook 02).

Each ``check_*`` function takes the learner's answer. ``None`` means "not attempted yet": it says
what to do and returns None. Any other answer is checked against what this repository measures or
computes; a wrong answer raises ``AssertionError`` with a hint, a right one prints and returns True.
Worked solutions and the grader's hidden checks are instructor material, outside the package.

A demonstration that builds on something you build calls :func:`yours_or_ours`: it runs on your
version when that is done, and on the package's until then, so a blank fails only its own cell
and its check. The graded checks always take your own code.
"""
from functools import lru_cache, wraps

from ..decoding.target import load_pretrained


@lru_cache(maxsize=1)
def shipped_target():
    """The shipped target and tokenizer, loaded once for all the checks."""
    return load_pretrained("tiny")


def forward_inputs(model, run) -> list:
    """The input ids of every call of ``model``'s forward while ``run()`` runs (a pre-hook
    records them)."""
    seen = []

    def record(module, args, kwargs):
        seen.append(args[0] if args else kwargs.get("input_ids"))

    hook = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        run()
    finally:
        hook.remove()
    return seen


def not_attempted(exercise: str, what: str) -> None:
    print(f"{exercise}: not attempted yet. {what}")


def correct(exercise: str, detail: str = "") -> bool:
    print(f"{exercise}: correct. {detail[:1].upper()}{detail[1:]}".rstrip())
    return True


def score(result, points: int) -> float:
    """An exercise's autograded score: ``points`` when its check returned True, else 0.

    Test cells show it, and nbgrader's autograder reads a number a test cell shows as the cell's
    score (a check that raises scores 0 too). See the README, "Teaching with it"."""
    return float(points) if result is True else 0.0


def yours_or_ours(name: str, yours, ours, ours_name: str | None = None):
    """What a demonstration uses for ``name``, something you build: ``yours`` when it is done,
    else the package's ``ours``, with one printed line that says so.

    A value is not done while it is None. A function is tried on each call: while it raises (a
    blank raises ``NotImplementedError``), ``ours`` answers, and the first such call prints the
    line, naming ``ours_name`` (default: the function's name). Only demonstrations use this."""
    ours_name = ours_name or getattr(ours, "__name__", "version")

    def note(why: str) -> None:
        print(f"{name} is {why}: this cell uses the package's {ours_name}")

    if yours is None:
        note("not done yet")
        return ours
    if not callable(yours):
        return yours
    told = []

    @wraps(yours)
    def either(*args, **kwargs):
        try:
            return yours(*args, **kwargs)
        except NotImplementedError:
            why = "not done yet"
        except Exception as e:          # a half-done version: the demonstration still runs
            why = f"not working yet (it raised {type(e).__name__})"
        if not told:
            told.append(True)
            note(why)
        return ours(*args, **kwargs)

    return either
