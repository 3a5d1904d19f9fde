"""Self-checks for the notebooks' exercises, one module per chapter (``ch02`` for notebook 02).

Each ``check_*`` takes the learner's answer. ``None`` ("not attempted yet") prints what to do and
returns None; a wrong answer raises ``AssertionError`` with a hint; a right one prints and returns
True. Every expected answer is computed from the package and the models, never typed in. How the
checks are graded: docs/teaching.md#grading-workflow."""
from functools import lru_cache, wraps

from ..decoding.target import load_pretrained


@lru_cache(maxsize=1)
def shipped_target():
    """The shipped target and tokenizer, loaded once for all the checks."""
    return load_pretrained("tiny")


def forward_inputs(model, run) -> list:
    """The input ids of every call of ``model``'s forward while ``run()`` runs."""
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


def attempt(exercise: str, what: str, given: int = 1):
    """A check's decorator: while its answer (the first argument), or any of its first ``given``
    arguments, is None, the check says what to do (:func:`not_attempted`) and returns None."""
    def decorate(check):
        first = check.__code__.co_varnames[:given]      # their names: they may come as keywords

        @wraps(check)
        def checked(*args, **kwargs):
            values = dict(zip(first, args)) | kwargs
            if any(name in values and values[name] is None for name in first):
                return not_attempted(exercise, what)
            return check(*args, **kwargs)
        return checked
    return decorate


def correct(exercise: str, detail: str = "") -> bool:
    print(f"{exercise}: correct. {detail[:1].upper()}{detail[1:]}".rstrip())
    return True


def score(result, points: int) -> float:
    """``points`` when an exercise's check returned True, else 0.0: what its test cell shows, which
    nbgrader reads as the cell's score (0 if the check raised); the course grader recounts it."""
    return float(points) if result is True else 0.0


def yours_or_ours(name: str, yours, ours, ours_name: str | None = None):
    """What a demonstration uses for ``name``: ``yours`` when it is done, else the package's
    ``ours``, saying so once (naming ``ours_name``, default ``ours``'s name). A value is not done
    while it is None; a function is tried on each call, ``ours`` answering while it raises. Only
    demonstrations use this: the graded checks always take your own code."""
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
