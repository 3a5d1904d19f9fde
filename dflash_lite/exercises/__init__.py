"""Self-checks for the notebooks' exercises, one module per chapter (``ch02`` for notebook 02).

Each ``check_*`` function takes the learner's answer. ``None`` means "not attempted yet": it says
what to do and returns None. Any other answer is checked against what this repository measures
or computes; a wrong answer raises ``AssertionError`` with a hint, a right one prints and returns
True. Worked solutions and the grader's hidden checks are instructor material, outside the
package.
"""
from functools import lru_cache

from ..target import load_pretrained


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
    print(f"{exercise}: correct. {detail}".rstrip())
    return True


def score(result, points: int) -> float:
    """An exercise's autograded score: ``points`` when its check returned True, else 0.

    The notebooks' test cells show this number; nbgrader's autograder reads a number shown by a
    test cell as the cell's score (a check that raises scores 0 too). See the README, "Teaching
    with it"."""
    return float(points) if result is True else 0.0
