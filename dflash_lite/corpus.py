"""The offline, deterministic corpus (docs/method.md#data): the standard library's Python source and
generated grade-school word problems, the shipped target's training text, and the named prompt
splits ``train``, ``held_out`` and ``probe`` (:func:`prompts`)."""
from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

HELD_OUT_SEED = 1_000_000  # math problems from seeds >= this are never trained on
EOS = "<|endoftext|>"
MASK = "<|mask|>"
SPECIAL_TOKENS = [EOS, MASK]
CODE_HELD_OUT_PERCENT = 8  # of stdlib files, chosen by path hash


# ----------------------------------------------------------------------------- math
NAMES = ["Ava", "Ben", "Chloe", "Dan", "Ella", "Finn", "Grace", "Hugo", "Iris", "Jack",
         "Kara", "Leo", "Mia", "Noah", "Olivia", "Paul", "Quinn", "Rosa", "Sam", "Tara",
         "Uma", "Victor", "Wendy", "Xavier", "Yara", "Zane", "Maya", "Omar", "Lena", "Ravi"]
ITEMS = ["apples", "pencils", "stickers", "cookies", "marbles", "books", "eggs", "cards",
         "oranges", "flowers", "stamps", "candies", "shells", "coins", "balloons", "cupcakes"]
PLACES = ["the market", "the bakery", "the school fair", "the shop", "the garden center",
          "the bookstore", "the farm stand", "the toy store"]
CONTAINERS = ["boxes", "bags", "baskets", "packs", "crates", "jars"]


@dataclass(frozen=True)
class MathProblem:
    question: str
    solution: str  # worked steps, one per line, ending with "The answer is N."
    answer: int

    @property
    def prompt(self) -> str:
        return f"Question: {self.question}\nAnswer:"

    @property
    def text(self) -> str:
        return f"{self.prompt} {self.solution}"


def _solved(question: str, steps: str, answer: int) -> MathProblem:
    return MathProblem(question, f"{steps}\nThe answer is {answer}.", answer)


def _add_sub(r: random.Random) -> MathProblem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    start, bought, gave = r.randint(5, 60), r.randint(2, 40), r.randint(1, 20)
    q = (f"{name} has {start} {item}. {name} buys {bought} more {item} at {r.choice(PLACES)} "
         f"and then gives {gave} {item} to a friend. How many {item} does {name} have now?")
    mid = start + bought
    end = mid - gave
    s = (f"{name} starts with {start} {item}.\n"
         f"After buying {bought} more, {name} has {start} + {bought} = {mid} {item}.\n"
         f"After giving away {gave}, {name} has {mid} - {gave} = {end} {item}.")
    return _solved(q, s, end)


def _multiply(r: random.Random) -> MathProblem:
    name, item, box = r.choice(NAMES), r.choice(ITEMS), r.choice(CONTAINERS)
    n, per = r.randint(2, 12), r.randint(3, 25)
    q = (f"{name} buys {n} {box} of {item}. Each of the {box} holds {per} {item}. "
         f"How many {item} does {name} buy in total?")
    total = n * per
    s = (f"Each of the {box} holds {per} {item}.\n"
         f"{name} buys {n} {box}, so {name} gets {n} * {per} = {total} {item}.")
    return _solved(q, s, total)


def _price(r: random.Random) -> MathProblem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    n, price, paid_extra = r.randint(2, 15), r.randint(1, 12), r.randint(1, 30)
    cost = n * price
    paid = cost + paid_extra
    q = (f"At {r.choice(PLACES)}, {item} cost ${price} each. {name} buys {n} {item} and pays with "
         f"${paid}. How much change does {name} get?")
    s = (f"The {item} cost {n} * {price} = ${cost}.\n"
         f"{name} pays ${paid}, so the change is {paid} - {cost} = ${paid_extra}.")
    return _solved(q, s, paid_extra)


def _share(r: random.Random) -> MathProblem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    friends, each = r.randint(2, 9), r.randint(2, 15)
    total = friends * each
    q = (f"{name} has {total} {item} and shares them equally among {friends} friends. "
         f"How many {item} does each friend get?")
    s = (f"{name} has {total} {item} for {friends} friends.\n"
         f"Each friend gets {total} / {friends} = {each} {item}.")
    return _solved(q, s, each)


def _weekly(r: random.Random) -> MathProblem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    per_day, days, weeks = r.randint(2, 20), r.randint(2, 7), r.randint(2, 6)
    per_week = per_day * days
    total = per_week * weeks
    q = (f"{name} makes {per_day} {item} a day, {days} days a week. "
         f"How many {item} does {name} make in {weeks} weeks?")
    s = (f"In one week {name} makes {per_day} * {days} = {per_week} {item}.\n"
         f"In {weeks} weeks {name} makes {per_week} * {weeks} = {total} {item}.")
    return _solved(q, s, total)


def _two_people(r: random.Random) -> MathProblem:
    a, b = r.sample(NAMES, 2)
    item = r.choice(ITEMS)
    x, times, more = r.randint(2, 20), r.randint(2, 5), r.randint(1, 15)
    y = x * times
    z = y + more
    q = (f"{a} has {x} {item}. {b} has {times} times as many {item} as {a}, and a third friend has "
         f"{more} more {item} than {b}. How many {item} do the three of them have together?")
    total = x + y + z
    s = (f"{b} has {x} * {times} = {y} {item}.\n"
         f"The third friend has {y} + {more} = {z} {item}.\n"
         f"Together they have {x} + {y} + {z} = {total} {item}.")
    return _solved(q, s, total)


def _percent(r: random.Random) -> MathProblem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    price = r.randint(2, 40) * 10
    pct = r.choice([10, 20, 25, 30, 40, 50])
    off = price * pct // 100
    final = price - off
    q = f"A set of {item} costs ${price}. {name} gets a {pct}% discount. How much does {name} pay?"
    s = (f"The discount is {pct}% of ${price}, which is {price} * {pct} / 100 = ${off}.\n"
         f"{name} pays {price} - {off} = ${final}.")
    return _solved(q, s, final)


def _remaining_fraction(r: random.Random) -> MathProblem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    denom = r.choice([2, 3, 4, 5])
    part = r.randint(2, 12)
    total = denom * part
    sold = total // denom
    left = total - sold
    eaten = r.randint(1, left - 1)
    final = left - eaten
    q = (f"{name} bakes {total} {item}. {name} sells 1/{denom} of them and then uses {eaten} more. "
         f"How many {item} are left?")
    s = (f"{name} sells {total} / {denom} = {sold} {item}.\n"
         f"That leaves {total} - {sold} = {left} {item}.\n"
         f"After using {eaten} more, {left} - {eaten} = {final} {item} are left.")
    return _solved(q, s, final)


def _rate_time(r: random.Random) -> MathProblem:
    name = r.choice(NAMES)
    speed, hours, extra = r.randint(3, 60), r.randint(2, 8), r.randint(1, 50)
    dist = speed * hours
    total = dist + extra
    q = (f"{name} drives at {speed} miles per hour for {hours} hours, then walks {extra} more "
         f"miles. How many miles does {name} travel in all?")
    s = (f"Driving, {name} covers {speed} * {hours} = {dist} miles.\n"
         f"With the walk, the total is {dist} + {extra} = {total} miles.")
    return _solved(q, s, total)


def _savings(r: random.Random) -> MathProblem:
    name = r.choice(NAMES)
    goal = r.randint(5, 40) * 10
    have = r.randint(1, goal // 20) * 10
    per_week = r.choice([5, 10, 15, 20, 25])
    need = goal - have
    weeks = -(-need // per_week)
    q = (f"{name} wants to save ${goal} for a bike and already has ${have}. "
         f"If {name} saves ${per_week} every week, how many weeks will it take to reach the goal?")
    s = (f"{name} still needs {goal} - {have} = ${need}.\n"
         f"At ${per_week} a week, that takes {need} / {per_week}, rounded up, = {weeks} weeks.")
    return _solved(q, s, weeks)


MATH_TEMPLATES = [_add_sub, _multiply, _price, _share, _weekly, _two_people, _percent,
                  _remaining_fraction, _rate_time, _savings]


def math_problem(seed: int) -> MathProblem:
    """The one problem that ``seed`` names; the same seed always gives the same problem."""
    r = random.Random(seed)
    return r.choice(MATH_TEMPLATES)(r)


def math_problems(n: int, split: str = "train", start: int = 0) -> list[MathProblem]:
    """``n`` problems of ``split`` ('train' or 'held_out'): its seeds ``start .. start+n-1``."""
    base = {"train": 0, "held_out": HELD_OUT_SEED}[split]
    if split == "train" and start + n > HELD_OUT_SEED:
        raise ValueError("train seeds would run into the held-out range")
    return [math_problem(base + start + i) for i in range(n)]


def final_answer(text: str) -> int | None:
    """The integer after the last ``The answer is``, or None when the text has no such line."""
    marker = "The answer is "
    at = text.rfind(marker)
    if at < 0:
        return None
    rest = text[at + len(marker):].lstrip("$")
    sign = "-" if rest.startswith("-") else ""
    try:
        return int(sign + "".join(itertools.takewhile(str.isdigit, rest[len(sign):])))
    except ValueError:
        return None


# ----------------------------------------------------------------------------- code
def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(split: str = "train") -> list[Path]:
    """Python files of the standard library (tests, idlelib and site-packages left out), sorted."""
    if split not in ("train", "held_out"):
        raise ValueError(f"split must be 'train' or 'held_out', got {split!r}")
    root = stdlib_root()
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("site-packages/", "test/", "idlelib/")) or "/test" in rel:
            continue
        held_out = hashlib.sha256(rel.encode()).digest()[0] % 100 < CODE_HELD_OUT_PERCENT
        if held_out == (split == "held_out"):
            out.append(path)
    return out


def read_source(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    return text if text.isascii() else None  # keep the byte-level vocabulary for ASCII code


def function_headers(paths: list[Path], n: int | None, seed: int = 0) -> list[str]:
    """Prompts made of a top-level ``def`` line plus its docstring, from ``paths``: ``n`` of them
    (all with None) in an order shuffled by ``seed``. A prompt ends right after the docstring (or
    the signature when there is none), so the model's job is to write the body."""
    candidates = []
    for path in paths:
        if (text := read_source(path)) is None:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.col_offset != 0 or len(node.body) < 2:
                continue
            first = node.body[0]
            has_doc = ast.get_docstring(node, clean=False) is not None
            end_line = first.end_lineno if has_doc else first.lineno - 1
            header = "".join(lines[node.lineno - 1:end_line])
            if 0 < len(header) < 600:
                candidates.append(header)
    random.Random(seed).shuffle(candidates)
    return candidates[:n]


def truncate_function(prompt: str, completion: str) -> str:
    """Prompt plus completion, cut where the function ends: the first non-blank line at column 0."""
    kept = itertools.takewhile(lambda line: not line.strip() or line[0].isspace(),
                               completion.split("\n"))
    return prompt + "\n".join(kept)


# ----------------------------------------------------------------------------- named prompt splits
SPLITS = ("train", "held_out", "probe")
MATH_SEEDS = {"train": range(500_000, HELD_OUT_SEED),
              "held_out": range(HELD_OUT_SEED + 2_000, HELD_OUT_SEED + 3_000),
              "probe": range(HELD_OUT_SEED + 3_000, HELD_OUT_SEED + 4_000)}
MAX_TRAIN_MATH = 20_000          # train prompts that held_out and probe are kept apart from
CODE_ORDER_SEED = {"held_out": 11, "probe": 21}   # the order each split's headers are drawn in


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")


@functools.cache
def _math_pool(split: str) -> tuple[MathProblem, ...]:
    if split == "train":
        return tuple(math_problem(s) for s in MATH_SEEDS["train"][:MAX_TRAIN_MATH])
    taken = {p.prompt for p in _math_pool("train")}
    if split == "probe":
        taken |= {p.prompt for p in _math_pool("held_out")}
    problems = map(math_problem, MATH_SEEDS[split])
    return tuple({p.prompt: p for p in problems if p.prompt not in taken}.values())


@functools.cache
def _code_pool(split: str, seed: int = 0) -> tuple[str, ...]:
    if split == "train":
        return tuple(function_headers(stdlib_files("train"), None, seed=seed))
    taken = set(_code_pool("train")) | set(_code_pool("held_out") if split == "probe" else ())
    headers = function_headers(stdlib_files("held_out"), None, CODE_ORDER_SEED[split])
    clean = [h for h in dict.fromkeys(headers) if h not in taken]
    return tuple(clean[: len(clean) // 2] if split == "held_out" else clean)


def _first(pool: tuple, n: int | None, split: str, domain: str) -> list:
    if n is not None and n > len(pool):
        raise ValueError(f"the {split} split has {len(pool)} {domain} prompts, {n} asked")
    return list(pool[:n])


def split_math_problems(split: str, n: int | None = None) -> list[MathProblem]:
    """The first ``n`` math problems of a named split (all with None), with their answers."""
    _check_split(split)
    return _first(_math_pool(split), n, split, "math")


def prompts(split: str, domain: str, n: int | None = None, seed: int = 0) -> list[str]:
    """The first ``n`` prompts of a named split (all with None): ``domain`` 'math', 'code', or
    'mixed' (half and half, math first). ``seed`` draws another sample of the train split's code
    headers; held_out and probe have one fixed order, so every measurement sees the same prompts."""
    _check_split(split)
    if domain == "mixed":
        math_n, code_n = (None, None) if n is None else ((n + 1) // 2, n // 2)
        return prompts(split, "math", math_n, seed) + prompts(split, "code", code_n, seed)
    if domain == "math":
        return [p.prompt for p in split_math_problems(split, n)]
    if domain == "code":
        return _first(_code_pool(split, seed if split == "train" else 0), n, split, "code")
    raise ValueError(f"domain must be math, code or mixed, got {domain!r}")


# ----------------------------------------------------------------------------- mixing
def code_documents(split: str = "train") -> Iterator[str]:
    yield from filter(None, map(read_source, stdlib_files(split)))


def manifest(num_math: int) -> dict:
    """What the corpus is made of, and a hash that changes when any byte of it does."""
    h = hashlib.sha256()
    files = 0
    for path in stdlib_files("train"):
        if (text := read_source(path)) is not None:
            h.update(path.relative_to(stdlib_root()).as_posix().encode())
            h.update(text.encode())
            files += 1
    for p in math_problems(min(num_math, 1000)):
        h.update(p.text.encode())
    return {"python_stdlib": str(stdlib_root()), "code_files": files, "math_problems": num_math,
            "math_templates": [t.__name__.lstrip("_") for t in MATH_TEMPLATES],
            "held_out_seed": HELD_OUT_SEED, "sha256": h.hexdigest()}

