"""Wrong answers cannot pass: for every chapter, plausible wrong variants of graded cells (most of
them bugs that once scored full marks) score below full marks, while the worked answers score full
marks. Each variant goes through the chapter's own check and the instructor's hidden checks, the
same two the grader (dflash_lite/grader.py) runs in its fresh process.

Variants are written as edits of the notebook's own solution (``solution(grade_id)`` with one
line replaced), so they stay close to what a student writes.
"""
import math
import random
import re
import statistics
from pathlib import Path

import nbformat
import pytest
import torch

from dflash_lite import grader
from dflash_lite.exercises import shipped_target

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = grader.load_hidden(ROOT / "instructor" / "hidden_checks.py")
NOTEBOOKS = {p.name[:2]: p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}


def solution(chapter: str, grade_id: str) -> str:
    """The source of a solution cell, the solution markers removed."""
    nb = nbformat.read(NOTEBOOKS[chapter], as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return "\n".join(line for line in cell.source.splitlines() if "### " not in line)


def define(source: str, name: str, **context):
    """Run ``source`` (definitions) in a fresh namespace holding ``context``; return ``name``."""
    namespace = {"torch": torch, "math": math, "random": random, "statistics": statistics, **context}
    exec(source, namespace)
    return namespace[name]


def edit(source: str, old: str, new: str) -> str:
    assert old in source, f"the solution no longer has {old!r}"
    return source.replace(old, new)


def earns(grade_id: str, check, *args, **namespace) -> bool:
    """Whether the answer gets the cell's full marks: its check returns True and, where the
    instructor has hidden checks for the cell, those pass too."""
    try:
        if check(*args) is not True:
            return False
        if grade_id in HIDDEN:
            HIDDEN[grade_id](namespace)
    except Exception:                                   # noqa: BLE001 (a raise is a fail)
        return False
    return True


@pytest.fixture(scope="module")
def models():
    from dflash_lite import load_pretrained
    from dflash_lite.target import SHIPPED_BASELINES

    target, tokenizer = shipped_target()
    draft, _ = load_pretrained(str(SHIPPED_BASELINES["tiny"]["draft_model"]))
    return target, draft, tokenizer


# ---------------------------------------------------------------------------------------------
# 02, speculative decoding

def greedy_variants():
    good = solution("02", "ch02_build_speculative_greedy")
    return good, {
        "never rolls back its cache": edit(good, "cache.crop(n - k)", "pass"),
        "rolls back one position too many": edit(good, "cache.crop(n - k)", "cache.crop(n - k - 1)"),
        "drops the target's own token after a full accept": edit(
            good, "new = block[0, 1:n + 1].tolist() + [choice[n].item()]",
            "new = block[0, 1:n + 1].tolist() + ([choice[n].item()] if n < k else [])"),
    }


def test_02_speculative_greedy(models):
    from dflash_lite.exercises import ch02

    target, draft, tokenizer = models
    good, wrong = greedy_variants()
    run = lambda src: earns("ch02_build_speculative_greedy_check", ch02.check_speculative_greedy,
                            define(src, "speculative_greedy"), target, draft, tokenizer, 48)
    assert run(good)
    passed = [name for name, src in wrong.items() if run(src)]
    assert not passed, f"wrong variants that pass: {passed}"


def tau(target, draft, tokenizer, k, max_new_tokens, steps=lambda a: a):
    from dflash_lite.baselines import DraftModelProposer
    from dflash_lite.decode import generate
    from dflash_lite.exercises import ch02
    from dflash_lite.target import stop_token_ids

    ids = ch02.first_prompt_ids(tokenizer)
    r = generate(target, DraftModelProposer(draft, target, k + 1), ids, max_new_tokens,
                 stop_token_ids=stop_token_ids(target, tokenizer))
    return statistics.mean(steps(a) for a in r.acceptance_lengths)


def test_02_exercise_1_tau(models):
    from dflash_lite.exercises import ch02

    target, draft, tokenizer = models
    run = lambda answer: earns("ch02_exercise_1_check", ch02.check_tau_by_draft_length, answer,
                               target, draft, tokenizer, 64)
    assert run({k: tau(target, draft, tokenizer, k, 64) for k in (2, 8)})
    assert not run({k: tau(target, draft, tokenizer, k, 64, lambda a: a - 1) for k in (2, 8)}), \
        "tau without the target's own token passed"
    assert not run({k: tau(target, draft, tokenizer, k - 1, 64) for k in (2, 8)}), "k - 1 drafts passed"
    assert not run({k: tau(target, draft, tokenizer, k, 64) * 1.08 for k in (2, 8)}), "tau + 8% passed"


ARTICLE = {
    "returns p (the lossless output)": "def article_output(p, q):\n    return p\n",
    "the lossless rule min(p, q) + residual": (
        "def article_output(p, q):\n    r = (p - q).clamp(min=0)\n"
        "    return torch.minimum(p, q) + (1 - torch.minimum(p, q).sum()) * r / r.sum()\n"),
    "rejected mass resampled from q": (
        "def article_output(p, q):\n    keep = p >= q\n"
        "    return torch.where(keep, q, torch.zeros_like(q)) + q[~keep].sum() * q\n"),
    "rejected mass spread uniformly": (
        "def article_output(p, q):\n    keep = p >= q\n"
        "    return torch.where(keep, q, torch.zeros_like(q)) + q[~keep].sum() / len(p)\n"),
    "keeps when p > 1.01 q (a near miss)": (
        "def article_output(p, q):\n    keep = p >= 1.01 * q\n"
        "    return torch.where(keep, q, torch.zeros_like(q)) + q[~keep].sum() * p\n"),
}


def test_02_exercise_2_article_output():
    from dflash_lite.exercises import ch02

    def run(src):
        fn = define(src, "article_output")
        return earns("ch02_exercise_2_check", ch02.check_article_output, fn, article_output=fn)

    assert run(_worked("02", "article_output"))
    passed = [name for name, src in ARTICLE.items() if run(src)]
    assert not passed, f"wrong variants that pass: {passed}"


def _worked(chapter: str, name: str) -> str:
    """A function's source from the worked solutions in notebooks/solutions/."""
    text = next((ROOT / "notebooks" / "solutions").glob(f"{chapter}_*.py")).read_text()
    match = re.search(rf"^def {name}\(.*?(?=^\S)", text, flags=re.M | re.S)
    return match.group(0)


def test_02_exercise_3_tv(models):
    from dflash_lite import SamplingParams
    from dflash_lite.acceptance import target_probs
    from dflash_lite.exercises import ch02

    target, draft, tokenizer = models
    article = define(_worked("02", "article_output"), "article_output")
    x = tokenizer("Question:", return_tensors="pt").input_ids

    def tv(p_params, q_params):
        with torch.inference_mode():
            p = target_probs(target(x).logits[0, -1:], p_params)[0].double()
            q = target_probs(draft(x).logits[0, -1:], q_params)[0].double()
        return 0.5 * float((article(p, q) - p).abs().sum())

    run = lambda answer: earns("ch02_exercise_3_check", ch02.check_tv_with_processors, answer, target,
                               draft, tokenizer, answer_3=answer, target=target, draft=draft,
                               tokenizer=tokenizer)
    processed = SamplingParams(temperature=0.7, top_p=0.9)
    assert run(tv(processed, processed))
    assert not run(tv(processed, SamplingParams(temperature=1.0))), "q left unprocessed passed"
    assert not run(tv(SamplingParams(temperature=1.0), SamplingParams(temperature=1.0))), \
        "no processors passed"


LOOKUP = {
    "the first earlier match, not the most recent": (
        "def lookup_draft(tokens, k, ngram=2):\n    tail = tokens[-ngram:]\n"
        "    for s in range(len(tokens) - ngram):\n"
        "        if tokens[s:s + ngram] == tail:\n            return tokens[s + ngram:s + ngram + k]\n"
        "    return []\n"),
    "no cut at k": (
        "def lookup_draft(tokens, k, ngram=2):\n    tail = tokens[-ngram:]\n"
        "    for s in range(len(tokens) - ngram - 1, -1, -1):\n"
        "        if tokens[s:s + ngram] == tail:\n            return tokens[s + ngram:]\n"
        "    return []\n"),
    "the match itself drafted": (
        "def lookup_draft(tokens, k, ngram=2):\n    tail = tokens[-ngram:]\n"
        "    for s in range(len(tokens) - ngram - 1, -1, -1):\n"
        "        if tokens[s:s + ngram] == tail:\n            return tokens[s:s + k]\n"
        "    return []\n"),
    "ngram ignored (always 2)": (
        "def lookup_draft(tokens, k, ngram=2):\n    tail = tokens[-2:]\n"
        "    for s in range(len(tokens) - 3, -1, -1):\n"
        "        if tokens[s:s + 2] == tail:\n            return tokens[s + 2:s + 2 + k]\n"
        "    return []\n"),
}


def test_02_exercise_4_lookup():
    from dflash_lite.exercises import ch02

    def run(src):
        fn = define(src, "lookup_draft")
        return earns("ch02_exercise_4_check", ch02.check_lookup_draft, fn, lookup_draft=fn)

    assert run(_worked("02", "lookup_draft"))
    passed = [name for name, src in LOOKUP.items() if run(src)]
    assert not passed, f"wrong variants that pass: {passed}"


# ---------------------------------------------------------------------------------------------
# 03, the block-diffusion drafter

@pytest.fixture(scope="module")
def ch03_setup():
    from dflash_lite import corpus, stop_token_ids
    from dflash_lite.checkpoints import load_drafter
    from dflash_lite.target import SHIPPED_DRAFTERS, context_features

    target, tokenizer = shipped_target()
    drafter = load_drafter(SHIPPED_DRAFTERS["tiny"]).eval()
    prompts = [p.prompt for p in corpus.math_problems(1, split="held_out", start=4000)]
    prompts += corpus.function_headers(corpus.stdlib_files("held_out"), 1, seed=31)
    ids = [tokenizer(p, return_tensors="pt").input_ids for p in prompts]
    context = dict(target=target, tokenizer=tokenizer, drafter=drafter, c=drafter.config, device="cpu",
                   block_size=16, context_features=context_features,
                   stops=stop_token_ids(target, tokenizer), max_new_tokens=24, mixed_ids=ids)
    return context


def test_03_rope(ch03_setup):
    from dflash_lite.exercises.ch03 import check_rope

    good = solution("03", "ch03_build_rope")
    wrong = {
        "interleaved pairs in rotate": edit(good, "return x * cos + torch.cat([-x2, x1], dim=-1) * sin",
                                            "x1, x2 = x[..., ::2], x[..., 1::2]\n    return x * cos + "
                                            "torch.stack([-x2, x1], dim=-1).flatten(-2) * sin"),
        "sin with the wrong sign": edit(good, "torch.cat([-x2, x1], dim=-1)", "torch.cat([x2, -x1], dim=-1)"),
        "frequencies interleaved": edit(good, "torch.cat([angles, angles], dim=-1)",
                                        "angles.repeat_interleave(2, dim=-1)"),
    }

    def run(src):
        namespace = dict(ch03_setup)
        exec(src, {"torch": torch, **namespace}, namespace)
        return earns("ch03_build_rope_check", check_rope, namespace["rope_cos_sin"], namespace["rotate"],
                     ch03_setup["drafter"])

    assert run(good)
    assert not [name for name, src in wrong.items() if run(src)]


def test_03_block_mask():
    from dflash_lite.exercises.ch03 import check_block_mask

    good = solution("03", "ch03_build_block_mask")
    wrong = {
        "the anchor itself visible": edit(good, "mask[rows, :a] = True", "mask[rows, :a + 1] = True"),
        "causal inside the block": edit(
            good, "mask[rows, T + j * B: T + (j + 1) * B] = True",
            "mask[rows, T + j * B: T + (j + 1) * B] = torch.ones(B, B, dtype=torch.bool).tril()"),
        "every block visible": edit(good, "mask[rows, T + j * B: T + (j + 1) * B] = True",
                                    "mask[rows, T:] = True"),
    }
    run = lambda src: earns("ch03_build_block_mask_check", check_block_mask, define(src, "my_block_mask"))
    assert run(good)
    assert not [name for name, src in wrong.items() if run(src)]


def test_03_exercise_1_visible_keys():
    from dflash_lite.exercises.ch03 import check_visible_keys

    assert earns("ch03_exercise_1_check", check_visible_keys, 13)
    for wrong in (16, 9, 4, 12):
        assert not earns("ch03_exercise_1_check", check_visible_keys, wrong), wrong


def test_03_exercise_2_least_sure(ch03_setup):
    from dflash_lite.exercises.ch03 import check_least_sure_position

    good = _worked("03", "least_sure_position")
    wrong = {"ranked by raw logits": edit(good, "[0].softmax(-1)", "[0]"),
             "counted from 0": edit(good, "argmin()) + 1", "argmin())"),
             "the most sure position": edit(good, ".argmin()) + 1", ".argmax()) + 1")}
    s = ch03_setup

    def run(src):
        fn = define(src, "least_sure_position", **s)
        return earns("ch03_exercise_2_check", check_least_sure_position, fn, s["drafter"], s["target"],
                     s["tokenizer"], 16)

    assert run(good)
    assert not [name for name, src in wrong.items() if run(src)]


def test_03_exercise_4_tau_at_block_size(ch03_setup):
    from dflash_lite.decode import DFlashProposer, generate
    from dflash_lite.exercises.ch03 import check_tau_at_block_size

    s = ch03_setup
    runs = {b: [generate(s["target"], DFlashProposer(s["drafter"], s["target"], b), x, 24,
                         stop_token_ids=s["stops"]).acceptance_lengths for x in s["mixed_ids"]]
            for b in (8, 16)}
    pooled = lambda b: sum(map(sum, runs[b])) / sum(map(len, runs[b]))
    run = lambda answer: earns("ch03_exercise_4_check", check_tau_at_block_size, answer, s["drafter"],
                               s["target"], s["mixed_ids"], 8, 24, s["stops"])
    assert run(pooled(8))
    assert not run(statistics.mean(statistics.mean(r) for r in runs[8])), "the mean of per-prompt means passed"
    assert not run(pooled(16)), "tau at the trained block size passed"


def test_03_exercise_5_unmasking(ch03_setup):
    from dflash_lite.decode import ChainDraft, DFlashProposer
    from dflash_lite.exercises.ch03 import check_unmasking_proposer

    s = ch03_setup
    good = re.search(r"^class ConfidenceUnmasking.*?(?=^\S)", next(
        (ROOT / "notebooks" / "solutions").glob("03_*.py")).read_text(), flags=re.M | re.S).group(0)
    wrong = {"ranked by raw logits": edit(good, "logits[0].softmax(-1).max(-1)", "logits[0].max(-1)"),
             "keeps k // 2": edit(good, "topk((k + 1) // 2)", "topk(k // 2)"),
             "second pass kept": edit(good, "tokens[keep] = draft[keep]", "pass")}
    math_ids = s["mixed_ids"][:1]

    def run(src):
        cls = define(src, "ConfidenceUnmasking", DFlashProposer=DFlashProposer, ChainDraft=ChainDraft)
        return earns("ch03_exercise_5_check", check_unmasking_proposer, cls, s["drafter"], s["target"],
                     math_ids, 16, 24, s["stops"], answer_5=cls, drafter=s["drafter"], target=s["target"],
                     block_size=16, prompt_ids={"math": math_ids}, max_new_tokens=24, stops=s["stops"],
                     tokenizer=s["tokenizer"])

    assert run(good)
    assert not [name for name, src in wrong.items() if run(src)]
