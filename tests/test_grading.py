"""Wrong answers cannot pass: for every chapter, plausible wrong variants of graded cells (most of
them bugs that once scored full marks) score below full marks, while the worked answers score full
marks. Each variant goes through the chapter's own check and the instructor's hidden checks, the
same two the grader (dflash_lite/course/grader.py) runs in its fresh process.

Variants are written as edits of the notebook's own solution (``solution(grade_id)`` with one
line replaced), so they stay close to what a student writes.
"""

import math
import os
import random
import re
import statistics
from pathlib import Path

import nbformat
import pytest
import torch

from dflash_lite.course import grader
from dflash_lite.exercises import attempt, shipped_target

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
    namespace = {
        "torch": torch,
        "math": math,
        "random": random,
        "statistics": statistics,
        **context,
    }
    exec(source, namespace)
    return namespace[name]


def edit(source: str, old: str, new: str) -> str:
    assert old in source, f"the solution no longer has {old!r}"
    return source.replace(old, new)


def earns(grade_id: str, check, *args, **namespace) -> bool:
    """Whether the answer gets the cell's full marks: its check returns True and, where the
    instructor has hidden checks for the cell, those pass too."""
    try:
        earned = check(*args) is True
        if earned and grade_id in HIDDEN:
            HIDDEN[grade_id](namespace)
    except Exception:  # noqa: BLE001 (a raise is a fail)
        earned = False
    if os.environ.get("GRADING_LOG"):  # one line per answer graded: the wrong-answer table
        with open(os.environ["GRADING_LOG"], "a") as log:
            log.write(f"{grade_id}\t{int(earned)}\n")
    return earned


@pytest.fixture(scope="module")
def models():
    from dflash_lite import load_pretrained
    from dflash_lite.decoding.target import SHIPPED_BASELINES

    target, tokenizer = shipped_target()
    draft, _ = load_pretrained(str(SHIPPED_BASELINES["tiny"]["draft_model"]))
    return target, draft, tokenizer


# ---------------------------------------------------------------------------------------------
# 02, speculative decoding


def greedy_variants():
    good = solution("02", "ch02_build_speculative_greedy")
    return good, {
        "never rolls back its cache": edit(good, "cache.crop(n - k)", "pass"),
        "rolls back one position too many": edit(
            good, "cache.crop(n - k)", "cache.crop(n - k - 1)"
        ),
        "drops the target's own token after a full accept": edit(
            good,
            "new = block[0, 1:n + 1].tolist() + [choice[n].item()]",
            "new = block[0, 1:n + 1].tolist() + ([choice[n].item()] if n < k else [])",
        ),
    }


def test_a_check_waits_for_every_argument_it_needs(capsys):
    """attempt(given=N): while any of a check's first N arguments is None, the check says what to
    do and returns None (0 points) without running; with all N given it runs, later ones free."""
    ran = []

    @attempt("Exercise 9", "Give both.", given=2)
    def check(answer, report, extra=None):
        ran.append((answer, report, extra))
        return True

    assert check(None, {}) is None and check(1, None) is None and not ran
    assert capsys.readouterr().out == "Exercise 9: not attempted yet. Give both.\n" * 2
    assert check(report={}, answer=None) is None and check(1, report=None) is None and not ran
    assert capsys.readouterr().out == "Exercise 9: not attempted yet. Give both.\n" * 2
    assert check(1, {}, None) is True and check(answer=2, report={}) is True
    assert ran == [(1, {}, None), (2, {}, None)]
    with pytest.raises(TypeError):              # a missing argument is a wrong call, as without it
        check(1)
    assert check.__name__ == "check" and check.__wrapped__.__name__ == "check"


def test_02_speculative_greedy(models):
    from dflash_lite.exercises import ch02

    target, draft, tokenizer = models
    good, wrong = greedy_variants()
    run = lambda src: earns(
        "ch02_build_speculative_greedy_check",
        ch02.check_speculative_greedy,
        define(src, "speculative_greedy"),
        target,
        draft,
        tokenizer,
        48,
    )
    assert run(good)
    passed = [name for name, src in wrong.items() if run(src)]
    assert not passed, f"wrong variants that pass: {passed}"


def tau(target, draft, tokenizer, k, max_new_tokens, steps=lambda a: a):
    from dflash_lite.decoding.baselines import DraftModelProposer
    from dflash_lite.decoding.decode import PerRow, generate
    from dflash_lite.exercises import ch02
    from dflash_lite.decoding.target import stop_token_ids

    ids = ch02.first_prompt_ids(tokenizer)
    r = generate(
        target,
        PerRow(DraftModelProposer(draft, target, k + 1)),
        ids,
        max_new_tokens,
        stop_token_ids=stop_token_ids(target, tokenizer),
    )
    return statistics.mean(steps(a) for a in r.acceptance_lengths)


def test_02_exercise_1_tau(models):
    from dflash_lite.exercises import ch02

    target, draft, tokenizer = models
    run = lambda answer: earns(
        "ch02_exercise_1_check",
        ch02.check_tau_by_draft_length,
        answer,
        target,
        draft,
        tokenizer,
        64,
    )
    assert run({k: tau(target, draft, tokenizer, k, 64) for k in (2, 8)})
    assert not run(
        {k: tau(target, draft, tokenizer, k, 64, lambda a: a - 1) for k in (2, 8)}
    ), "tau without the target's own token passed"
    assert not run(
        {k: tau(target, draft, tokenizer, k - 1, 64) for k in (2, 8)}
    ), "k - 1 drafts passed"
    assert not run(
        {k: tau(target, draft, tokenizer, k, 64) * 1.08 for k in (2, 8)}
    ), "tau + 8% passed"


ARTICLE = {
    "returns p (the lossless output)": "def article_output(p, q):\n    return p\n",
    "the lossless rule min(p, q) + residual": (
        "def article_output(p, q):\n    r = (p - q).clamp(min=0)\n"
        "    return torch.minimum(p, q) + (1 - torch.minimum(p, q).sum()) * r / r.sum()\n"
    ),
    "rejected mass resampled from q": (
        "def article_output(p, q):\n    keep = p >= q\n"
        "    return torch.where(keep, q, torch.zeros_like(q)) + q[~keep].sum() * q\n"
    ),
    "rejected mass spread uniformly": (
        "def article_output(p, q):\n    keep = p >= q\n"
        "    return torch.where(keep, q, torch.zeros_like(q)) + q[~keep].sum() / len(p)\n"
    ),
    "keeps when p > 1.01 q (a near miss)": (
        "def article_output(p, q):\n    keep = p >= 1.01 * q\n"
        "    return torch.where(keep, q, torch.zeros_like(q)) + q[~keep].sum() * p\n"
    ),
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
    from dflash_lite.decoding.acceptance import target_probs
    from dflash_lite.exercises import ch02

    target, draft, tokenizer = models
    article = define(_worked("02", "article_output"), "article_output")
    x = tokenizer("Question:", return_tensors="pt").input_ids

    def tv(p_params, q_params):
        with torch.inference_mode():
            p = target_probs(target(x).logits[0, -1:], p_params)[0].double()
            q = target_probs(draft(x).logits[0, -1:], q_params)[0].double()
        return 0.5 * float((article(p, q) - p).abs().sum())

    run = lambda answer: earns(
        "ch02_exercise_3_check",
        ch02.check_tv_with_processors,
        answer,
        target,
        draft,
        tokenizer,
        answer_3=answer,
        target=target,
        draft=draft,
        tokenizer=tokenizer,
    )
    processed = SamplingParams(temperature=0.7, top_p=0.9)
    assert run(tv(processed, processed))
    assert not run(tv(processed, SamplingParams(temperature=1.0))), "q left unprocessed passed"
    assert not run(
        tv(SamplingParams(temperature=1.0), SamplingParams(temperature=1.0))
    ), "no processors passed"


LOOKUP = {
    "the first earlier match, not the most recent": (
        "def lookup_draft(tokens, k, ngram=2):\n    tail = tokens[-ngram:]\n"
        "    for s in range(len(tokens) - ngram):\n"
        "        if tokens[s:s + ngram] == tail:\n"
        "            return tokens[s + ngram:s + ngram + k]\n"
        "    return []\n"
    ),
    "no cut at k": (
        "def lookup_draft(tokens, k, ngram=2):\n    tail = tokens[-ngram:]\n"
        "    for s in range(len(tokens) - ngram - 1, -1, -1):\n"
        "        if tokens[s:s + ngram] == tail:\n            return tokens[s + ngram:]\n"
        "    return []\n"
    ),
    "the match itself drafted": (
        "def lookup_draft(tokens, k, ngram=2):\n    tail = tokens[-ngram:]\n"
        "    for s in range(len(tokens) - ngram - 1, -1, -1):\n"
        "        if tokens[s:s + ngram] == tail:\n            return tokens[s:s + k]\n"
        "    return []\n"
    ),
    "ngram ignored (always 2)": (
        "def lookup_draft(tokens, k, ngram=2):\n    tail = tokens[-2:]\n"
        "    for s in range(len(tokens) - 3, -1, -1):\n"
        "        if tokens[s:s + 2] == tail:\n            return tokens[s + 2:s + 2 + k]\n"
        "    return []\n"
    ),
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
    from dflash_lite.decoding.checkpoints import load_drafter
    from dflash_lite.decoding.target import SHIPPED_DRAFTERS, context_features

    target, tokenizer = shipped_target()
    drafter = load_drafter(SHIPPED_DRAFTERS["tiny"]).eval()
    prompts = [p.prompt for p in corpus.math_problems(1, split="held_out", start=4000)]
    prompts += corpus.function_headers(corpus.stdlib_files("held_out"), 1, seed=31)
    ids = [tokenizer(p, return_tensors="pt").input_ids for p in prompts]
    context = dict(
        target=target,
        tokenizer=tokenizer,
        drafter=drafter,
        c=drafter.config,
        device="cpu",
        block_size=16,
        context_features=context_features,
        stops=stop_token_ids(target, tokenizer),
        max_new_tokens=24,
        mixed_ids=ids,
    )
    return context


def test_03_rope(ch03_setup):
    from dflash_lite.exercises.ch03 import check_rope

    good = solution("03", "ch03_build_rope")
    wrong = {
        "interleaved pairs in rotate": edit(
            good,
            "return x * cos + torch.cat([-x2, x1], dim=-1) * sin",
            "x1, x2 = x[..., ::2], x[..., 1::2]\n    return x * cos + "
            "torch.stack([-x2, x1], dim=-1).flatten(-2) * sin",
        ),
        "sin with the wrong sign": edit(
            good, "torch.cat([-x2, x1], dim=-1)", "torch.cat([x2, -x1], dim=-1)"
        ),
        "frequencies interleaved": edit(
            good, "torch.cat([angles, angles], dim=-1)", "angles.repeat_interleave(2, dim=-1)"
        ),
    }

    def run(src):
        namespace = dict(ch03_setup)
        exec(src, {"torch": torch, **namespace}, namespace)
        return earns(
            "ch03_build_rope_check",
            check_rope,
            namespace["rope_cos_sin"],
            namespace["rotate"],
            ch03_setup["drafter"],
        )

    assert run(good)
    assert not [name for name, src in wrong.items() if run(src)]


def test_03_block_mask():
    from dflash_lite.exercises.ch03 import check_block_mask

    good = solution("03", "ch03_build_block_mask")
    wrong = {
        "the anchor itself visible": edit(
            good, "mask[rows, :a] = True", "mask[rows, :a + 1] = True"
        ),
        "causal inside the block": edit(
            good,
            "mask[rows, T + j * B: T + (j + 1) * B] = True",
            "mask[rows, T + j * B: T + (j + 1) * B] = torch.ones(B, B, dtype=torch.bool).tril()",
        ),
        "every block visible": edit(
            good, "mask[rows, T + j * B: T + (j + 1) * B] = True", "mask[rows, T:] = True"
        ),
    }
    run = lambda src: earns(
        "ch03_build_block_mask_check", check_block_mask, define(src, "my_block_mask")
    )
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
    wrong = {
        "ranked by raw logits": edit(good, "[0].softmax(-1)", "[0]"),
        "counted from 0": edit(good, "argmin()) + 1", "argmin())"),
        "the most sure position": edit(good, ".argmin()) + 1", ".argmax()) + 1"),
    }
    s = ch03_setup

    def run(src):
        fn = define(src, "least_sure_position", **s)
        return earns(
            "ch03_exercise_2_check",
            check_least_sure_position,
            fn,
            s["drafter"],
            s["target"],
            s["tokenizer"],
            16,
        )

    assert run(good)
    assert not [name for name, src in wrong.items() if run(src)]


def test_03_exercise_4_tau_at_block_size(ch03_setup):
    from dflash_lite.decoding.decode import DFlashProposer, generate
    from dflash_lite.exercises.ch03 import check_tau_at_block_size

    s = ch03_setup
    runs = {
        b: [
            generate(
                s["target"],
                DFlashProposer(s["drafter"], s["target"], b),
                x,
                24,
                stop_token_ids=s["stops"],
            ).acceptance_lengths
            for x in s["mixed_ids"]
        ]
        for b in (8, 16)
    }
    pooled = lambda b: sum(map(sum, runs[b])) / sum(map(len, runs[b]))
    run = lambda answer: earns(
        "ch03_exercise_4_check",
        check_tau_at_block_size,
        answer,
        s["drafter"],
        s["target"],
        s["mixed_ids"],
        8,
        24,
        s["stops"],
    )
    assert run(pooled(8))
    assert not run(
        statistics.mean(statistics.mean(r) for r in runs[8])
    ), "the mean of per-prompt means passed"
    assert not run(pooled(16)), "tau at the trained block size passed"


def test_03_exercise_5_unmasking(ch03_setup):
    from dflash_lite.decoding.decode import ChainDraft, DFlashProposer
    from dflash_lite.exercises.ch03 import check_unmasking_proposer

    s = ch03_setup
    good = re.search(
        r"^class ConfidenceUnmasking.*?(?=^\S)",
        next((ROOT / "notebooks" / "solutions").glob("03_*.py")).read_text(),
        flags=re.M | re.S,
    ).group(0)
    wrong = {
        "ranked by raw logits": edit(good, "logits[0].softmax(-1).max(-1)", "logits[0].max(-1)"),
        "keeps k // 2": edit(good, "topk((k + 1) // 2)", "topk(k // 2)"),
        "second pass kept": edit(good, "tokens[keep] = draft[keep]", "pass"),
    }
    math_ids = s["mixed_ids"][:1]

    def run(src):
        cls = define(
            src, "ConfidenceUnmasking", DFlashProposer=DFlashProposer, ChainDraft=ChainDraft
        )
        return earns(
            "ch03_exercise_5_check",
            check_unmasking_proposer,
            cls,
            s["drafter"],
            s["target"],
            math_ids,
            16,
            24,
            s["stops"],
            answer_5=cls,
            drafter=s["drafter"],
            target=s["target"],
            block_size=16,
            prompt_ids={"math": math_ids},
            max_new_tokens=24,
            stops=s["stops"],
            tokenizer=s["tokenizer"],
        )

    assert run(good)
    assert not [name for name, src in wrong.items() if run(src)]


# ---------------------------------------------------------------------------------------------
# 00, the tour; 01, the autoregressive bottleneck (answers are numbers; each wrong one is a
# plausible slip: the prefill forgotten, a tied weight counted twice, ...)


def test_00_exercise_1_forwards():
    from dflash_lite import generate_autoregressive, stop_token_ids
    from dflash_lite.decoding.checkpoints import load_drafter
    from dflash_lite.decoding.decode import DFlashProposer, generate
    from dflash_lite.exercises import ch00
    from dflash_lite.decoding.target import default_drafter_path

    model, tokenizer = shipped_target()
    ids, stops = ch00._tour_prompt_ids(), stop_token_ids(model, tokenizer)
    ar = len(generate_autoregressive(model, ids, 64, stop_token_ids=stops).tokens)
    sd = len(
        generate(
            model,
            DFlashProposer(load_drafter(default_drafter_path("tiny")), model),
            ids,
            64,
            stop_token_ids=stops,
        ).acceptance_lengths
    )
    assert earns("ch00_exercise_1_check", ch00.check_target_forwards, (ar, 1 + sd))
    for wrong in ((ar + 1, 1 + sd), (ar, sd), (ar, ar)):  # one too many; no prefill; no speedup
        assert not earns("ch00_exercise_1_check", ch00.check_target_forwards, wrong), wrong


def test_00_exercise_3_template_and_4_llama():
    from dflash_lite.exercises import ch00
    from dflash_lite.decoding.target import SHIPPED

    good = _worked("00", "_bulk")
    template = lambda src: define(src, "_bulk", corpus=__import__("dflash_lite").corpus)
    assert earns("ch00_exercise_3_check", ch00.check_math_template, template(good))
    wrong = {
        "the global random, not r": edit(
            good,
            "count, per, loose = r.randint(2, 12)",
            "count, per, loose = random.randint(2, 12)",
        ),
        "wrong arithmetic": edit(good, "packed = count * per", "packed = count * per + 1"),
        "no final answer line": edit(good, 'f"The answer is {total}."', 'f"So {total}."'),
    }
    assert not [
        n
        for n, src in wrong.items()
        if earns("ch00_exercise_3_check", ch00.check_math_template, template(src))
    ]
    # exercise 4: the shipped target is not a Llama
    assert not earns("ch00_exercise_4_check", ch00.check_llama_parity, str(SHIPPED["tiny"]))


def test_01_exercises():
    from dflash_lite.exercises import ch01

    model, tokenizer = shipped_target()
    prompt = ch01.corpus.math_problems(1, split="held_out", start=700)[0].prompt
    n = tokenizer(prompt, return_tensors="pt").input_ids.shape[1]
    assert earns("ch01_exercise_1_check", ch01.check_cache_positions, n + 15)
    for wrong in (n + 16, n, 16):
        assert not earns("ch01_exercise_1_check", ch01.check_cache_positions, wrong), wrong

    weights = ch01.weight_bytes_per_step(model)
    every = sum(p.numel() * p.element_size() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    assert earns("ch01_exercise_2_check", ch01.check_weight_bytes, weights)
    for wrong in (
        every + embedding.numel() * 4,
        every / 2,
        weights / 4,
    ):  # tied twice; bf16; per weight
        assert not earns("ch01_exercise_2_check", ch01.check_weight_bytes, wrong), wrong

    c = model.config
    per_position = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 4
    assert earns("ch01_exercise_3_check", ch01.check_kv_crossover, weights / per_position)
    mha = 2 * c.num_hidden_layers * c.num_attention_heads * c.head_dim * 4
    assert c.num_attention_heads != c.num_key_value_heads
    for wrong in (weights / mha, weights / (per_position / 2)):  # all query heads; keys only
        assert not earns("ch01_exercise_3_check", ch01.check_kv_crossover, wrong), wrong

    t = {1: 0.010, 16: 0.024}
    assert earns("ch01_exercise_4_check", ch01.check_break_even, (2.4, 3.0), t)
    for wrong in ((2.4, 2.4 + 0.25), (1 / 2.4, 1.25 / 2.4), (2.4, 2.4 * 1.25 * 1.25)):
        assert not earns("ch01_exercise_4_check", ch01.check_break_even, wrong, t), wrong


# ---------------------------------------------------------------------------------------------
# 04, conditioning; 05, training


def test_04_exercises_1_and_2():
    from dflash_lite.decoding.checkpoints import load_drafter
    from dflash_lite.exercises import ch04
    from dflash_lite.decoding.target import default_drafter_path

    model, _ = shipped_target()
    h = model.config.hidden_size
    assert earns("ch04_exercise_1_check", ch04.check_tap_indices, ([6, 7], 2 * h))
    for wrong in (([5, 6], 2 * h), ([6, 7], h), ([5, 6, 7], 3 * h)):  # index 0 forgotten; one tap
        assert not earns("ch04_exercise_1_check", ch04.check_tap_indices, wrong), wrong

    drafter = load_drafter(default_drafter_path("tiny"))
    c = drafter.config
    cached = 2 * c.num_layers * c.num_key_value_heads * c.head_dim
    assert earns(
        "ch04_exercise_2_check", ch04.check_cache_numbers, (cached, c.num_context_features)
    )
    for wrong in (
        (cached // 2, c.num_context_features),
        (c.num_context_features, cached),
        (2 * c.num_layers * c.num_attention_heads * c.head_dim, c.num_context_features),
    ):
        assert not earns("ch04_exercise_2_check", ch04.check_cache_numbers, wrong), wrong


@pytest.fixture(scope="module")
def ch05_data(tmp_path_factory):
    from dflash_lite.training.data import regenerate
    from dflash_lite.prompts import training_prompts

    target, tokenizer = shipped_target()
    for p in target.parameters():
        p.requires_grad_(False)
    cache = tmp_path_factory.mktemp("cache")
    return regenerate(target, tokenizer, training_prompts(8, 4, seed=0), 24, cache_dir=cache)


def test_05_exercises_1_to_3(ch05_data):
    from collections import Counter

    from dflash_lite.exercises import ch05

    w = torch.exp(-(torch.arange(1, 16) - 1) / 7.0)
    assert earns("ch05_exercise_1_check", ch05.check_loss_weights, float(w[:4].sum() / w.sum()))
    for wrong in (
        float(w[:3].sum() / w.sum()),
        float(w[:4].sum() / 15),
        float(w[1:5].sum() / w.sum()),
    ):
        assert not earns("ch05_exercise_1_check", ch05.check_loss_weights, wrong), wrong

    assert earns("ch05_exercise_2_check", ch05.check_half_weight_gamma, 7 / math.log(2))
    for wrong in (7.0, 8 / math.log(2), math.log(2) * 7):
        assert not earns("ch05_exercise_2_check", ch05.check_half_weight_gamma, wrong), wrong

    def entropy(tokens, log=math.log):
        counts = Counter(tokens)
        return -sum(n / len(tokens) * log(n / len(tokens)) for n in counts.values())

    d = ch05_data
    responses = [t for s, p in zip(d.sequences, d.prompt_lengths) for t in s[p:]]
    assert earns("ch05_exercise_3_check", ch05.check_unigram_loss, entropy(responses), d)
    wrong = {
        "bits": entropy(responses, math.log2),
        "prompts too": entropy([t for s in d.sequences for t in s]),
        "mean of per-sequence entropies": statistics.mean(
            entropy(list(s[p:])) for s, p in zip(d.sequences, d.prompt_lengths)
        ),
    }
    assert not [
        n for n, v in wrong.items() if earns("ch05_exercise_3_check", ch05.check_unigram_loss, v, d)
    ]


def test_05_exercise_4_ar_loss(ch05_data):
    from dflash_lite.exercises import ch05

    target, tokenizer = shipped_target()
    good = _worked("05", "ar_loss")
    F = torch.nn.functional
    wrong = {
        "the last slot weighted too": edit(
            good, "torch.cat([weights, torch.zeros(1)])", "torch.cat([weights, torch.ones(1)])"
        ),
        "unweighted mean": edit(good, "return (w * ce).sum() / w.sum()", "return ce.mean()"),
        "not normalised": edit(good, "return (w * ce).sum() / w.sum()", "return (w * ce).sum()"),
    }
    run = lambda src: earns(
        "ch05_exercise_4_check",
        ch05.check_ar_loss,
        define(src, "ar_loss", F=F),
        target,
        ch05_data,
        tokenizer,
    )
    assert run(good)
    assert not [n for n, src in wrong.items() if run(src)]


def test_05_exercise_5_training(ch05_data):
    from dflash_lite.training.data import epoch_batches
    from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig
    from dflash_lite.exercises import ch05
    from dflash_lite.training.train import drafter_loss
    from dflash_lite.training.trainer import TrainConfig, Trainer

    target, tokenizer = shipped_target()
    good = _worked("05", "train").replace("num_layers=2", "num_layers=1")
    context = dict(
        target=target,
        tokenizer=tokenizer,
        data=ch05_data,
        block_size=8,
        DrafterConfig=DrafterConfig,
        DFlashDrafter=DFlashDrafter,
        Trainer=Trainer,
        TrainConfig=TrainConfig,
        epoch_batches=epoch_batches,
        drafter_loss=drafter_loss,
    )
    wrong = {
        "ignores its seed": edit(
            edit(good, "torch.manual_seed(seed)", "torch.manual_seed(0)"),
            "manual_seed(seed)",
            "manual_seed(0)",
        ),
        "ignores its seed and flips the weights": edit(
            edit(
                edit(good, "torch.manual_seed(seed)", "torch.manual_seed(0)"),
                "manual_seed(seed)",
                "manual_seed(0)",
            ),
            "drafter_loss(m, target, b, weights)",
            "drafter_loss(m, target, b, weights.flip(0))",
        ),
        "never seeds the model": edit(good, "    torch.manual_seed(seed)\n", ""),
        "seeded, but the weights flipped": edit(
            good,
            "drafter_loss(m, target, b, weights)",
            "drafter_loss(m, target, b, weights.flip(0))",
        ),
        "seeded, but the weights permuted": edit(
            good,
            "drafter_loss(m, target, b, weights)",
            "drafter_loss(m, target, b, weights[torch.randperm(len(weights))])",
        ),
    }

    def run(src):
        fn = define(src, "train", **context)
        return earns(
            "ch05_exercise_5_check",
            ch05.check_weighted_training,
            fn,
            target,
            ch05_data,
            tokenizer,
            8,
            answer_5=fn,
            block_size=8,
        )

    assert run(good)
    assert not [n for n, src in wrong.items() if run(src)]


# ---------------------------------------------------------------------------------------------
# 06, benchmarks; 07, the source article; 08, real models; 09, trees; 10, GPUs. The reports and
# probes are the committed ones (read only), or small synthetic ones.


def committed_report(name: str = "06_benchmark_cpu.json") -> dict:
    import json

    return json.loads((ROOT / "results" / name).read_text())


def measured_report(**options) -> dict:
    """A small report measured by the package (bench's own steps, cheap rows only: the plain loop
    and the fixed-block DFlash rows; no cost model), ``default`` on its last row."""
    from dflash_lite.measuring import benchmark

    config = benchmark.BenchConfig(**{**dict(
        num_prompts=1, block_sizes=(16,), max_new_tokens=24, repeats=1, baselines=False,
        hf_dflash=False, tree_sizes=(), quiet=True), **options})
    setup = benchmark.resolve(config)
    methods = [m for m in setup.methods if m.kind.value in ("autoregressive", "dflash")]
    methods[-1].default = True
    report = benchmark.run_benchmark(methods, setup.prompts, config.max_new_tokens, 1)
    report["env"].update(setup.settings)
    return report


def forged_row(report: dict, block_size: int = 16, by: float = 1.0) -> dict:
    """``report`` with its DFlash row of ``block_size`` claiming ``by`` more tau (histogram and cost
    model edited to match)."""
    import copy

    forged = copy.deepcopy(report)
    for rows in (forged["methods"], (forged.get("cost_model") or {}).get("rows", [])):
        for r in rows:
            if r.get("kind") == "dflash" and r.get("block_size") == block_size:
                r["tau"] += by
                if "tau_histogram" in r:
                    r["tau_histogram"][-1] += 1
    return forged


def hand_written(tau: float = 9.0, sizes=(4, 8, 16)) -> dict:
    """A report written by hand: the rows and costs a check reads, nothing measured."""
    costs = {"t_target": {"1": 0.01, **{str(b): 0.01 + 0.001 * b for b in sizes}},
             "t_draft": {str(b): 0.002 for b in sizes}}
    rows = [{"name": f"DFlash (ours) B={b}", "kind": "dflash", "block_size": b, "tau": tau,
             "tau_histogram": [0] * 8 + [1], "speedup": 3.0, "error": None, "default": b == 16,
             "identical_to_target": True} for b in sizes]
    env = {"target": "tiny", "prompts": 3, "max_new_tokens": 48,
           "prompts_source": "built-in held-out code", "drafter": "dflash_lite/models/tiny-dflash"}
    return {"env": env, "methods": rows, "cost_model": {"costs": costs, "rows": []}}


def test_06_exercises():
    from dflash_lite.exercises import ch06
    from dflash_lite.measuring.report import Kind, row_of

    report = committed_report()
    t, d = report["cost_model"]["costs"]["t_target"], report["cost_model"]["costs"]["t_draft"]
    tau16 = row_of(report, Kind.DFLASH, block_size=16)["tau"]
    good = tau16 * t["1"] / (t["16"] + d["16"])
    run1 = lambda answer, r: earns("ch06_exercise_1_check", ch06.check_predicted_speedup,
                                   answer, r, report=r)
    assert run1(good, report)
    for wrong in (tau16 * t["1"] / t["16"], tau16 * t["16"] / (t["1"] + d["16"]), tau16):
        assert not run1(wrong, report), wrong
    # reports forged to fit the check: the answer is right for them, but they were not measured
    forged = {"hand-written": hand_written(), "B=16 tau + 1": forged_row(report)}
    passed = [name for name, r in forged.items()
              if run1(row_of(r, Kind.DFLASH, block_size=16)["tau"] * t["1"] / (t["16"] + d["16"])
                      if name != "hand-written" else 9.0 * 0.01 / (0.026 + 0.002), r)]
    assert not passed, f"forged reports that earn exercise 1: {passed}"

    sizes = [b for b in (4, 8, 16) if str(b) in d]
    good = {b: (t[str(b)] + d[str(b)]) / t["1"] for b in sizes}
    run2 = lambda answer, r: earns("ch06_exercise_2_check", ch06.check_break_even, answer, r,
                                   report=r)
    assert run2(good, report)
    no_draft = {b: t[str(b)] / t["1"] for b in sizes}
    assert not run2(no_draft, report)
    assert not run2({16: good[16]}, report)
    fake = hand_written()
    assert not run2({b: (0.01 + 0.001 * b + 0.002) / 0.01 for b in (4, 8, 16)}, fake), \
        "a hand-written report earns exercise 2"
    assert not run2(good, forged_row(report)), "a report with a forged B=16 row earns exercise 2"


@pytest.fixture(scope="module")
def code_report():
    return measured_report(domain="code")


def test_06_exercise_3_code_report(code_report):
    import copy

    from dflash_lite.exercises import ch06

    run = lambda answer, r: earns("ch06_exercise_3_check", ch06.check_fastest_method, answer, r,
                                  code_report=r)
    rows = [r for r in code_report["methods"] if r["error"] is None and r["speedup"] is not None]
    fastest = max(rows, key=lambda r: r["speedup"])["name"]
    slowest = min(rows, key=lambda r: r["speedup"])["name"]
    assert fastest != slowest
    assert run(fastest, code_report)
    assert not run(slowest, code_report)
    math = committed_report()
    assert not run(fastest, math), "a math report passed as the code one"
    # forged to fit the check (each earned full marks before the hidden check re-derived them)
    relabelled = copy.deepcopy(math)
    relabelled["env"]["prompts_source"] = "built-in held-out code"
    math_samples = [r for r in math["methods"] if r["error"] is None and r["speedup"] is not None]
    inflated = copy.deepcopy(code_report)
    next(r for r in inflated["methods"] if r["name"] == slowest)["speedup"] = 99.0
    forged = {
        "a math report relabelled code": (max(math_samples, key=lambda r: r["speedup"])["name"],
                                          relabelled),
        "the slowest row's speedup raised": (slowest, inflated),
        "hand-written": ("DFlash (ours) B=4", hand_written()),
        "the code report's B=16 tau + 1": (fastest, forged_row(code_report)),
    }
    passed = [name for name, (answer, r) in forged.items() if run(answer, r)]
    assert not passed, f"forged reports that earn exercise 3: {passed}"


def test_07_exercises(ch03_setup):
    from dflash_lite.decoding.decode import DFlashProposer, generate
    from dflash_lite.exercises import ch07
    from dflash_lite.prompts import builtin_prompts

    s = ch03_setup
    ids = s["tokenizer"](builtin_prompts("math", 1)[0], return_tensors="pt").input_ids
    lengths = generate(
        s["target"],
        DFlashProposer(s["drafter"], s["target"], 16),
        ids,
        24,
        stop_token_ids=s["stops"],
    ).acceptance_lengths
    tau, rate = statistics.mean(lengths), sum(a - 1 for a in lengths) / (len(lengths) * 15)
    run = lambda answer: earns(
        "ch07_exercise_1_check",
        ch07.check_rate_and_tau,
        answer,
        s["target"],
        s["drafter"],
        s["tokenizer"],
        24,
    )
    assert run((tau, rate))
    for wrong in (
        (tau - 1, rate),
        (tau, sum(lengths) / (len(lengths) * 16)),
        (tau, (tau - 1) / 16),
    ):
        assert not run(wrong), wrong

    good = (
        "def mse_on_probs(logits, labels, weights):\n"
        "    onehot = torch.nn.functional.one_hot(labels, logits.shape[-1]).to(logits.dtype)\n"
        "    per_position = ((logits.softmax(-1) - onehot) ** 2).mean(-1)\n"
        "    return (per_position * weights).sum(-1).mean() / weights.sum()\n"
    )
    wrong = {
        "summed over the vocabulary": edit(good, ".mean(-1)\n", ".sum(-1)\n"),
        "unweighted": edit(
            good, "(per_position * weights).sum(-1).mean() / weights.sum()", "per_position.mean()"
        ),
        "on the logits, not the probabilities": edit(
            good, "logits.softmax(-1) - onehot", "logits - onehot"
        ),
        "weights not normalised": edit(good, ".mean() / weights.sum()", ".mean()"),
    }

    def run2(src):
        fn = define(src, "mse_on_probs")
        return earns("ch07_exercise_2_check", ch07.check_mse_on_probs, fn, mse_on_probs=fn)

    assert run2(good)
    assert not [n for n, src in wrong.items() if run2(src)]


def test_08_exercises(tmp_path, ch03_setup):
    import copy

    from dflash_lite.decoding.checkpoints import export_dflash
    from dflash_lite.exercises import ch08
    from dflash_lite.measuring.report import Kind, row_of

    ratio = {1: 1.0, 16: 1.7}
    assert earns("ch08_exercise_1_check", ch08.check_predicted_from_curve, 6.5 / 1.8, ratio)
    for wrong in (6.5 / 1.7, 6.5 / 1.8 / 16, 6.5 * 1.8):
        assert not earns(
            "ch08_exercise_1_check", ch08.check_predicted_from_curve, wrong, ratio
        ), wrong

    report = committed_report("08_tiny_builtin_cpu_float32.json")
    exported = export_dflash(ch03_setup["drafter"], tmp_path / "public")
    from_export = copy.deepcopy(report)
    from_export["env"]["drafter"] = str(exported)
    tau = row_of(report, Kind.DFLASH, block_size=16)["tau"]
    run = lambda answer, r: earns(
        "ch08_exercise_2_check", ch08.check_exported_drafter, answer, exported, r, report,
        answer_2=answer, export_dir=exported, exported_report=r, report=report
    )
    assert run(tau, from_export)
    assert not run(tau, report), "the shipped directory's report passed as the export's"
    assert not run(tau + 0.5, from_export)
    # forged to fit the check (each earned full marks before the hidden check re-derived them)
    from dflash_lite.decoding.drafter import DFlashDrafter

    torch.manual_seed(0)
    untrained = export_dflash(DFlashDrafter(ch03_setup["drafter"].config).eval(),
                              tmp_path / "untrained")
    other = copy.deepcopy(from_export)
    other["env"]["drafter"] = str(untrained)
    forged = {"the B=16 tau + 0.5": (tau + 0.5, exported, forged_row(from_export, 16, 0.5)),
              "an untrained drafter's export with the shipped one's report": (tau, untrained,
                                                                              other)}
    passed = [name for name, (answer, directory, r) in forged.items() if earns(
        "ch08_exercise_2_check", ch08.check_exported_drafter, answer, directory, r, report,
        answer_2=answer, export_dir=directory, exported_report=r, report=report)]
    assert not passed, f"forged reports that earn exercise 2: {passed}"


def test_09_exercises():
    from dflash_lite.exercises import ch09
    from dflash_lite.decoding.tree import add_branch, build_tree

    g = torch.Generator().manual_seed(0)
    draft_logits = torch.randn(15, 50, generator=g) * 3
    root = torch.tensor([1])
    tree = build_tree(root, torch.log_softmax(draft_logits, -1), 12)
    P = 20
    deepest = max(range(len(tree)), key=lambda i: tree.depths[i])
    assert earns(
        "ch09_exercise_1_check", ch09.check_visible_keys, P + tree.depths[deepest] + 1, tree, P
    )
    for wrong in (P + tree.depths[deepest], P + len(tree), tree.depths[deepest] + 1):
        assert not earns("ch09_exercise_1_check", ch09.check_visible_keys, wrong, tree, P), wrong

    t, t_draft = {1: 0.01, 16: 0.02, 33: 0.03}, 0.005
    good = (t[33] + t_draft) / (t[16] + t_draft)
    assert earns("ch09_exercise_2_check", ch09.check_break_even_gain, good, t, t_draft)
    for wrong in (t[33] / t[16], (t[33] + t_draft) / t[16], t[32 // 2] / t[33]):
        assert not earns(
            "ch09_exercise_2_check", ch09.check_break_even_gain, wrong, t, t_draft
        ), wrong

    depth = {temp: ch09.tree_depth(draft_logits, root, temp) for temp in (0.5, 1.0, 2.0)}
    assert depth[0.5] != depth[1.0], "degenerate logits: the temperature changes nothing"
    assert earns("ch09_exercise_3_check", ch09.check_sharper_tree, depth[0.5], draft_logits, root)
    assert not earns(
        "ch09_exercise_3_check", ch09.check_sharper_tree, depth[1.0], draft_logits, root
    )
    assert not earns(
        "ch09_exercise_3_check", ch09.check_sharper_tree, depth[2.0], draft_logits, root
    )

    branch = tree.chain[:2] + [int(root)] * 3
    new = len(add_branch(tree, branch)) - len(tree)
    assert 0 < new < len(branch), "degenerate branch: all of it or none of it is new"
    assert earns("ch09_exercise_5_check", ch09.check_branch_nodes, new, tree, branch)
    for wrong in (len(branch), len(branch) - tree.path_length(branch) + 1, 0):
        if wrong != new:
            assert not earns(
                "ch09_exercise_5_check", ch09.check_branch_nodes, wrong, tree, branch
            ), wrong


def test_10_exercises():
    from dflash_lite.exercises import ch10

    probe = {
        "params_target_B": 8.03,
        "t_target_ms": {"1": 20.0, "16": 21.0},
        "t_draft_ms": {"16": 1.5},
    }
    floor = 1e3 * 8.03e9 * 2 / 4.8e12
    assert earns("ch10_exercise_1_check", ch10.check_bandwidth_floor, floor, probe)
    for wrong in (floor / 1e3, floor * 2, floor / 2):  # seconds; fp32; one byte
        assert not earns("ch10_exercise_1_check", ch10.check_bandwidth_floor, wrong, probe), wrong

    good = 5.0 * (21.0 + 1.5) / 20.0
    assert earns("ch10_exercise_2_check", ch10.check_tau_for_speedup, good, probe, 5.0)
    for wrong in (5.0 * 21.0 / 20.0, 5.0 * 20.0 / (21.0 + 1.5)):
        assert not earns(
            "ch10_exercise_2_check", ch10.check_tau_for_speedup, wrong, probe, 5.0
        ), wrong

    row = {
        "tau": 6.0,
        "overhead_per_step_s": 0.004,
        "t_target_1": 0.02,
        "t_target_b": 0.022,
        "t_draft_b": 0.003,
    }
    verify = {"eager": 22.0, "reduce-overhead": 11.0}
    r, o = 2.0, 0.004
    good = 6.0 * (0.02 / r + o) / ((0.022 + 0.003) / r + o)
    assert earns("ch10_exercise_3_check", ch10.check_graphs_speedup, good, row, verify)
    for wrong in (
        6.0 * (0.02 / r + o / r) / ((0.025) / r + o / r),
        6.0 * (0.02 + o) / (0.025 + o),
        6.0 * 0.02 / 0.025,
    ):  # overhead sped up; no graphs; no o
        assert not earns(
            "ch10_exercise_3_check", ch10.check_graphs_speedup, wrong, row, verify
        ), wrong


def test_04_exercise_3_untrained_drafters_tie_and_score_nothing():
    from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig
    from dflash_lite.exercises import ch04

    target, tokenizer = shipped_target()
    drafters = {}
    for name, taps in (("deep", [5, 6]), ("shallow", [0, 1])):
        torch.manual_seed(0)
        config = DrafterConfig.from_target(
            target.config,
            tokenizer.mask_token_id,
            num_layers=1,
            block_size=8,
            target_layer_ids=taps,
        )
        drafters[name] = DFlashDrafter(config).eval()
    for answer in ("deep", "shallow"):  # a tie: neither answer may score
        assert not earns(
            "ch04_exercise_3_check",
            ch04.check_taps_experiment,
            answer,
            drafters["deep"],
            drafters["shallow"],
        ), answer


def test_00_exercise_2_distinct_samples():
    from dflash_lite import SamplingParams, generate_autoregressive, stop_token_ids
    from dflash_lite.exercises import ch00

    model, tokenizer = shipped_target()
    ids, stops = ch00._tour_prompt_ids(), stop_token_ids(model, tokenizer)
    params = SamplingParams(temperature=0.8, top_p=0.9)
    runs = {
        tuple(
            generate_autoregressive(
                model,
                ids,
                32,
                params,
                stop_token_ids=stops,
                generator=torch.Generator().manual_seed(s),
            ).tokens
        )
        for s in range(10)
    }
    one_generator = torch.Generator().manual_seed(0)  # one generator for all ten runs
    shared = {
        tuple(
            generate_autoregressive(
                model, ids, 32, params, stop_token_ids=stops, generator=one_generator
            ).tokens
        )
        for _ in range(10)
    }
    assert earns("ch00_exercise_2_check", ch00.check_distinct_samples, len(runs))
    for wrong in {len(runs) + 1, len(runs) - 1, 10, 1, len(shared)} - {len(runs)}:
        assert not earns("ch00_exercise_2_check", ch00.check_distinct_samples, wrong), wrong


def test_03_exercise_3_second_pass(ch03_setup):
    from dflash_lite.decoding.decode import DFlashProposer
    from dflash_lite.exercises.ch03 import _first_block, check_second_pass

    s = ch03_setup
    ids = s["mixed_ids"][0]
    features, last, _ = _first_block(s["drafter"], s["target"], ids, 16)
    drafts = {}
    for passes in (1, 2, 3):
        proposer = DFlashProposer(s["drafter"], s["target"], 16, passes=passes)
        proposer.start(ids, features)
        drafts[passes] = proposer.propose(last.view(1), [15])[0].tokens
    assert not torch.equal(
        drafts[1], drafts[2]
    ), "degenerate prompt: the second pass changes nothing"
    run = lambda answer: earns(
        "ch03_exercise_3_check", check_second_pass, answer, s["drafter"], s["target"], ids, 16
    )
    assert run(drafts[2])
    assert not run(drafts[1]), "the first-pass draft passed"
    assert not run(
        torch.cat([last.reshape(1), drafts[2][:-1]])
    ), "the draft shifted by one slot passed"


def test_06_exercise_4_own_prompts(tmp_path):
    import copy
    import json

    from dflash_lite.exercises import ch06

    own = tmp_path / "own.jsonl"
    own.write_text(
        "".join(
            json.dumps({"prompt": f"Write a haiku about {w}."}) + "\n"
            for w in ("rain", "tea", "ink")
        )
    )
    report = measured_report(prompts=str(own), num_prompts=3, max_new_tokens=8)
    default = next(r for r in report["methods"] if r.get("default"))
    other = next(
        r
        for r in report["methods"]
        if not r.get("default") and r["speedup"] is not None and r["speedup"] != default["speedup"]
    )
    run = lambda answer, path, r: earns(
        "ch06_exercise_4_check", ch06.check_own_prompts, answer, path, r, own_file=path,
        own_report=r
    )
    assert run(default["speedup"], own, report)
    assert not run(other["speedup"], own, report), "another row's speedup passed"
    two = tmp_path / "two.jsonl"
    two.write_text("".join(own.read_text().splitlines(keepends=True)[:2]))
    assert not run(default["speedup"], two, report), "two prompts passed"
    fewer = copy.deepcopy(report)
    fewer["env"]["prompts"] = 1
    assert not run(default["speedup"], own, fewer), "a report on one of the prompts passed"
    # forged to fit the check (each earned full marks before the hidden check re-derived them)
    math = copy.deepcopy(committed_report())
    math["env"]["prompts"] = 3
    named = copy.deepcopy(math)
    named["env"]["prompts_source"] = str(own)
    edited = copy.deepcopy(report)
    edited_default = next(r for r in edited["methods"] if r.get("default"))
    edited_default["tau"] += 1.0
    edited_default["tau_histogram"][-1] += 1
    forged = {"the built-in math report, 3 prompts": math,
              "the built-in math report naming the file": named,
              "its own report, the default row's tau + 1": edited}
    passed = [name for name, r in forged.items()
              if run(next(x for x in r["methods"] if x.get("default"))["speedup"], own, r)]
    assert not passed, f"forged reports that earn exercise 4: {passed}"


def test_07_exercise_3_harmless_threshold(ch03_setup):
    from dflash_lite import SamplingParams
    from dflash_lite.decoding.acceptance import target_probs
    from dflash_lite.exercises import ch07

    target, tokenizer = ch03_setup["target"], ch03_setup["tokenizer"]

    def top(prompt):
        with torch.inference_mode():
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            return float(
                target_probs(target(ids).logits[0, -1:], SamplingParams(temperature=1.0))[0].max()
            )

    text = ch07.builtin_prompts("math", 1)[0]
    cuts = [text[:n] for n in range(8, len(text), 7)]
    sure = next(c for c in cuts if top(c) >= 0.5)
    unsure = next(c for c in cuts if top(c) < 0.5)
    run = lambda prompt: earns(
        "ch07_exercise_3_check", ch07.check_harmless_threshold, prompt, target, tokenizer
    )
    assert run(unsure)
    assert not run(sure), "a prompt after which the top token has p >= 0.5 passed"


def test_09_exercise_4_falls_back(ch03_setup):
    from dflash_lite.decoding.costs import StepCosts
    from dflash_lite.decoding.decode import generate
    from dflash_lite.exercises import ch09
    from dflash_lite.decoding.session import default_policy

    s = ch03_setup
    target, tokenizer, drafter = s["target"], s["tokenizer"], s["drafter"]
    run = lambda policy: earns("ch09_exercise_4_check", ch09.check_falls_back, policy)

    # hand-written costs (ms) are taken as they are: the choices do not depend on the machine
    cpu_like = StepCosts({1: 4.0, 2: 4.2, 4: 4.3, 8: 4.5, 16: 5.4, 17: 5.5, 32: 6.8},
                         {2: 1.3, 4: 1.3, 8: 1.3, 16: 1.5})

    def ran(text):
        policy = default_policy(drafter, target, cpu_like)
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
        generate(target, policy, ids, 48, stop_token_ids=s["stops"])
        return policy

    assert run(ran("Once upon a time, in a quiet village by the sea,"))
    assert not run(default_policy(drafter, target)), "a policy that never ran passed"
    assert not run(drafter), "the drafter instead of the policy passed"


# ---------------------------------------------------------------------------------------------
# Build-it cells whose check is the notebook's own test cell (asserts): each variant replaces
# the solution cell, then the chapter's test cell and the hidden checks run, as the grader runs
# them. The cells before it run once, as the notebook has them (smaller parameters where given).


def _code(source: str) -> str:
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def _cell(chapter: str, grade_id: str) -> str:
    nb = nbformat.read(NOTEBOOKS[chapter], as_version=4)
    return next(
        c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )


def run_before(chapter: str, grade_id: str, **parameters) -> dict:
    """The namespace of the chapter's code cells run in order up to the cell ``grade_id`` (not
    included); ``parameters`` override the parameters cell's values."""
    namespace = {"__name__": "__main__"}
    nb = nbformat.read(NOTEBOOKS[chapter], as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return namespace
        if cell.cell_type == "code":
            exec(compile(_code(cell.source), f"<notebook {chapter}>", "exec"), namespace)
            if cell.source.startswith("# Parameters"):
                namespace.update(parameters)
    raise LookupError(grade_id)


def cell_earns(chapter: str, grade_id: str, source: str, namespace: dict) -> bool:
    """Whether ``source`` as the solution cell ``grade_id`` gets the marks of its test cell (run
    after it in a copy of ``namespace``) and of the hidden checks."""
    namespace = dict(namespace)
    check_id = f"{grade_id}_check"
    try:
        exec(compile(_code(source), "<solution cell>", "exec"), namespace)
        exec(compile(_code(_cell(chapter, check_id)), "<test cell>", "exec"), namespace)
    except Exception:  # noqa: BLE001 (a raise is a fail)
        return False
    # the hidden checks, as earns() runs them, on the namespace the test cell ran in
    return earns(check_id, lambda: True, **namespace, **{grader.SOLUTION_KEY: source})


def wrong_that_earn(chapter: str, grade_id: str, wrong: dict, namespace: dict) -> list[str]:
    return [name for name, src in wrong.items() if cell_earns(chapter, grade_id, src, namespace)]


@pytest.fixture(scope="module")
def ch03_notebook():
    return run_before("03", "ch03_build_context", num_prompts=1, max_new_tokens=16)


def test_03_build_context(ch03_notebook):
    good = solution("03", "ch03_build_context")
    wrong = {
        "eps left out": edit(
            good, "x.pow(2).mean(-1, keepdim=True) + eps)", "x.pow(2).mean(-1, keepdim=True))"
        ),
        "eps outside the root": edit(
            good,
            "weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)",
            "weight * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps)",
        ),
        "the taps read as one slice": edit(
            good,
            "torch.cat([out.hidden_states[layer + 1] for layer in c.target_layer_ids], dim=-1)",
            "torch.cat(out.hidden_states[c.target_layer_ids[0] + 1:c.target_layer_ids[-1] + 2]"
            ", dim=-1)",
        ),
    }
    assert cell_earns("03", "ch03_build_context", good, ch03_notebook)
    assert not wrong_that_earn("03", "ch03_build_context", wrong, ch03_notebook)
    # the given setup rewritten (split, reworded): the re-run on other inputs still sees its own
    rewritten = edit(good, "C, H, eps = ids.shape[1], c.hidden_size, c.rms_norm_eps",
                     "C = ids.size(1)\nH = c.hidden_size\neps = float(c.rms_norm_eps)")
    rewritten = edit(rewritten, "with torch.inference_mode():\n    out = target(",
                     "out = target(")
    assert cell_earns("03", "ch03_build_context", rewritten, ch03_notebook)


def test_03_build_kv_injection():
    namespace = run_before("03", "ch03_build_kv_injection", num_prompts=1)
    good = solution("03", "ch03_build_kv_injection")
    wrong = {
        "mask inverted": edit(good, "masked_fill(~mask", "masked_fill(mask"),
        "mask ignored": edit(
            good, 'scores = scores.masked_fill(~mask.to(scores.device), float("-inf"))', "pass"
        ),
        "key positions counted from 0": edit(
            good, "kv_pos = torch.cat([ctx_pos, x_pos])", "kv_pos = torch.arange(kv_in.shape[1])"
        ),
        "queries placed right after the context": edit(
            good, "*rope_cos_sin(x_pos))", "*rope_cos_sin(x_pos - x_pos[0] + len(ctx_pos)))"
        ),
    }
    assert cell_earns("03", "ch03_build_kv_injection", good, namespace)
    assert not wrong_that_earn("03", "ch03_build_kv_injection", wrong, namespace)


def test_03_build_drafter_forward():
    namespace = run_before("03", "ch03_build_drafter_forward", num_prompts=1)
    good = solution("03", "ch03_build_drafter_forward")
    wrong = {
        "mask not passed on": edit(
            good, "context, block_pos, ctx_pos, mask)", "context, block_pos, ctx_pos)"
        ),
        "block placed right after the context": edit(
            good,
            "context, block_pos, ctx_pos, mask)",
            "context, ctx_pos[-1] + 1 + torch.arange(block_ids.shape[1]), ctx_pos, mask)",
        ),
        "two layers typed in": edit(
            good, "for layer in drafter.layers:", "for layer in drafter.layers[:2]:"
        ),
    }
    assert cell_earns("03", "ch03_build_drafter_forward", good, namespace)
    assert not wrong_that_earn("03", "ch03_build_drafter_forward", wrong, namespace)


def test_05_build_loss():
    namespace = run_before("05", "ch05_build_loss", num_prompts=12, max_new_tokens=24)
    good = solution("05", "ch05_build_loss")
    wrong = {
        "normalised by a fixed constant": edit(
            good, "my_loss = (w_slot * ce).sum() / w_slot.sum()",
            "my_loss = (w_slot * ce).mean() / w.mean()",
        ),
        "gamma typed in": edit(
            good, "torch.exp(-(torch.arange(1, block_size) - 1) / gamma)",
            "torch.exp(-(torch.arange(1, block_size) - 1) / 4.0)",
        ),
        "slot k weighted by w_(k+1)": edit(
            good, "w_slot = w.to(device)[k - 1]", "w_slot = w.to(device)[k.clamp(max=len(w) - 1)]"
        ),
        "accuracy over all slots": edit(
            good, "hit[k == j].float().mean().item()", "hit.float().mean().item()"
        ),
    }
    assert cell_earns("05", "ch05_build_loss", good, namespace)
    assert not wrong_that_earn("05", "ch05_build_loss", wrong, namespace)


@pytest.fixture(scope="module")
def ch09_notebook():
    return run_before("09", "ch09_build_best_paths", num_prompts=1, max_new_tokens=16)


def test_09_build_best_paths(ch09_notebook):
    good = solution("09", "ch09_build_best_paths")
    wrong = {
        "one position too few": edit(
            good, "if len(ranks) < top_ids.shape[0]:", "if len(ranks) < top_ids.shape[0] - 1:"
        ),
        "one candidate too few": edit(
            good,
            "if ranks[-1] + 1 < top_ids.shape[1]:",
            "if ranks[-1] + 1 < top_ids.shape[1] - 1:",
        ),
        "not best first (shortest first)": edit(
            good, "    return found", "    return sorted(found, key=len)"
        ),
        "ranked by the mean log-probability": edit(
            good,
            "return sum(float(top_logp[d, r]) for d, r in enumerate(ranks))",
            "return statistics.mean(float(top_logp[d, r]) for d, r in enumerate(ranks))",
        ),
    }
    assert cell_earns("09", "ch09_build_best_paths", good, ch09_notebook)
    assert not wrong_that_earn("09", "ch09_build_best_paths", wrong, ch09_notebook)


def test_09_build_tree_mask(ch09_notebook):
    namespace = dict(ch09_notebook)
    exec(_code(solution("09", "ch09_build_best_paths")), namespace)
    exec(_code(_cell("09", "ch09_build_best_paths_check")), namespace)
    good = solution("09", "ch09_build_tree_mask")
    wrong = {
        "the parent only": edit(
            good,
            "ancestors[i] |= ancestors[tree.parents[i]]",
            "ancestors[i, tree.parents[i]] = True",
        ),
        "children before parents": edit(
            good, "for i in range(1, len(tree)):", "for i in reversed(range(1, len(tree))):"
        ),
        "every earlier node (causal)": edit(
            good, "ancestors[i] |= ancestors[tree.parents[i]]", "ancestors[i, :i] = True"
        ),
        "parent and grandparent": edit(
            good,
            "ancestors[i] |= ancestors[tree.parents[i]]",
            "ancestors[i, tree.parents[i]] = ancestors[i, max(tree.parents[tree.parents[i]], 0)]"
            " = True",
        ),
    }
    assert cell_earns("09", "ch09_build_tree_mask", good, namespace)
    assert not wrong_that_earn("09", "ch09_build_tree_mask", wrong, namespace)


# ---------------------------------------------------------------------------------------------
# 11, batching and serving


def test_11_exercises():
    from dflash_lite.decoding.cache import SlotCache
    from dflash_lite.exercises import ch11

    at, width = [31, 25, 28], 16
    cache = SlotCache(1, rows=3)
    cache.rewind(at)
    good = int(cache.verify_mask(width)["full_attention"].sum())
    assert good == sum(width * a + width * (width + 1) // 2 for a in at)
    assert earns("ch11_exercise_1_check", ch11.check_visible_pairs, good, at, width)
    for wrong in (len(at) * (width * max(at) + width * (width + 1) // 2),   # one offset, the max
                  sum(width * a + width * width for a in at),                # no causal triangle
                  sum(width * a for a in at)):                               # the new slots left out
        assert not earns("ch11_exercise_1_check", ch11.check_visible_pairs, wrong, at, width), wrong

    lengths = [1, 2, 2, 3, 5, 8, 8, 16, 4, 1, 7]
    good = ch11.expected_minimum(lengths, 4)
    by_hand = sum((sum(x >= k for x in lengths) / len(lengths)) ** 4 for k in range(1, 17))
    assert math.isclose(good, by_hand)
    assert earns("ch11_exercise_2_check", ch11.check_naive_tau, good, lengths, 4)
    for wrong in (statistics.mean(lengths), min(lengths), ch11.expected_minimum(lengths, 2),
                  statistics.mean(lengths) / 4):
        assert not earns("ch11_exercise_2_check", ch11.check_naive_tau, wrong, lengths, 4), wrong

    heat = {16: {"t_target": {1: 0.010, 16: 0.060}, "t_draft": {16: 0.008}}}
    good = (0.060 + 0.008) / 0.010
    assert earns("ch11_exercise_3_check", ch11.check_break_even_tau, good, heat, 16, 16)
    for wrong in (0.060 / 0.010, (0.060 + 0.008) / 0.060, 0.010 / (0.060 + 0.008)):
        assert not earns(
            "ch11_exercise_3_check", ch11.check_break_even_tau, wrong, heat, 16, 16
        ), wrong


def test_11_build_verify_mask():
    good = solution("11", "ch11_build_verify_mask")
    wrong = {
        "one offset for all rows": edit(
            good, "at = [int(a) for a in write_positions]",
            "at = [int(write_positions[0])] * len(write_positions)",
        ),
        "the slots up to the longest row visible (rejected, stale or padding)": edit(
            good, "mask[r, 0, :, :start] = True", "mask[r, 0, :, :max(at)] = True"
        ),
        "the last committed slot hidden": edit(
            good, "mask[r, 0, :, :start] = True", "mask[r, 0, :, :start - 1] = True"
        ),
        "the new tokens see each other whole (no ancestors)": edit(
            good, "mask[r, 0, :, start:start + width] = ancestors",
            "mask[r, 0, :, start:start + width] = True",
        ),
    }
    namespace = {"torch": torch}
    assert cell_earns("11", "ch11_build_verify_mask", good, namespace)
    assert not wrong_that_earn("11", "ch11_build_verify_mask", wrong, namespace)


def test_11_build_positions():
    good = solution("11", "ch11_build_positions")
    line = "return torch.as_tensor(write_positions)[:, None] + depths[None]"
    rows = "depths[None].repeat(len(write_positions), 1)"
    wrong = {
        "positions advanced by the batch's maximum": edit(
            good, line, f"return torch.as_tensor(write_positions).max() + {rows}"
        ),
        "one offset for all rows": edit(good, line, f"return int(write_positions[0]) + {rows}"),
        "consecutive, whatever the depths": edit(
            good, line,
            "return torch.as_tensor(write_positions)[:, None] + torch.arange(len(depths))[None]",
        ),
        "counted from zero": edit(good, line, f"return {rows}"),
    }
    namespace = {"torch": torch}
    assert cell_earns("11", "ch11_build_positions", good, namespace)
    assert not wrong_that_earn("11", "ch11_build_positions", wrong, namespace)
