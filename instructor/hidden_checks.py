"""Hidden checks: run by the grader (dflash_lite/grader.py) after a graded cell's own check
passed, on the namespace that cell ran in. Instructor-only: in neither the student bundle nor the
student package. ``CHECKS`` maps a grade id to a function that raises AssertionError."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location(
    "instructor_references", Path(__file__).with_name("references.py")
)
references = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(references)


def _pairs(seed: int, count: int = 8):
    g = torch.Generator().manual_seed(1000 + seed)
    for size in (3, 9, 33)[: 1 + seed % 3] + (17,):
        for _ in range(count):
            p = torch.rand(size, generator=g, dtype=torch.float64) ** 3
            q = torch.rand(size, generator=g, dtype=torch.float64) ** 3
            yield p / p.sum(), q / q.sum()


def ch02_article_output(ns: dict) -> None:
    for p, q in _pairs(2):
        got = torch.as_tensor(ns["article_output"](p.clone(), q.clone()), dtype=torch.float64)
        torch.testing.assert_close(got, references.article_output(p, q))


def ch02_tv(ns: dict) -> None:
    from dflash_lite.acceptance import SamplingParams, target_probs

    target, draft, tokenizer = ns["target"], ns["draft"], ns["tokenizer"]
    params = SamplingParams(temperature=0.7, top_p=0.9)
    x = tokenizer("Question:", return_tensors="pt").input_ids
    with torch.inference_mode():
        p = target_probs(target(x).logits[0, -1:], params)[0].double()
        q = target_probs(draft(x).logits[0, -1:], params)[0].double()
    expected = 0.5 * float((references.article_output(p, q) - p).abs().sum())
    assert abs(float(ns["answer_3"]) - expected) < 1e-4, "not the TV of the processed rule"


def ch02_lookup(ns: dict) -> None:
    g = torch.Generator().manual_seed(77)
    for _ in range(200):
        tokens = torch.randint(
            0, 3, (int(torch.randint(0, 25, (1,), generator=g)),), generator=g
        ).tolist()
        k, n = int(torch.randint(1, 7, (1,), generator=g)), int(
            torch.randint(1, 4, (1,), generator=g)
        )
        assert list(ns["lookup_draft"](list(tokens), k, ngram=n)) == references.lookup_draft(
            tokens, k, n
        )


def ch03_unmasking(ns: dict) -> None:
    from dflash_lite.decode import generate
    from dflash_lite.exercises.ch03 import _first_block

    answer, drafter, target = ns["answer_5"], ns["drafter"], ns["target"]
    block_size, prompt_ids = ns["block_size"], ns["prompt_ids"]["math"]
    reference = references.unmasking_proposer()
    from dflash_lite import corpus

    tokenizer = ns.get("tokenizer")
    extra = (
        []
        if tokenizer is None
        else [
            tokenizer(t, return_tensors="pt").input_ids
            for t in corpus.function_headers(corpus.stdlib_files("held_out"), 2, seed=5)
        ]
    )
    for size in (block_size, 8, 12):
        for x in list(prompt_ids) + extra:
            features, last, _ = _first_block(drafter, target, x, size)
            drafts = []
            for cls in (answer, reference):
                proposer = cls(drafter, target, size)
                proposer.start(x, features)
                drafts.append(torch.as_tensor(proposer.propose(last, size - 1)[0]).cpu())
            assert torch.equal(
                drafts[0], drafts[1]
            ), f"B={size}: a first step's draft differs from the reference"
    for x in prompt_ids:
        mine = generate(
            target,
            answer(drafter, target, block_size),
            x,
            ns["max_new_tokens"],
            stop_token_ids=ns["stops"],
        )
        ref = generate(
            target,
            reference(drafter, target, block_size),
            x,
            ns["max_new_tokens"],
            stop_token_ids=ns["stops"],
        )
        assert mine.acceptance_lengths == ref.acceptance_lengths, "a later step drafts differently"


def ch07_mse(ns: dict) -> None:
    g = torch.Generator().manual_seed(5)
    for n, k, v in ((2, 4, 7), (4, 3, 19)):
        logits = torch.randn(n, k, v, generator=g) * 3
        labels = torch.randint(0, v, (n, k), generator=g)
        weights = torch.rand(k, generator=g) + 0.1
        got = torch.as_tensor(ns["mse_on_probs"](logits, labels, weights))
        torch.testing.assert_close(got, references.mse_on_probs(logits, labels, weights))


CHECKS = {
    "ch02_exercise_2_check": ch02_article_output,
    "ch02_exercise_3_check": ch02_tv,
    "ch02_exercise_4_check": ch02_lookup,
    "ch03_exercise_5_check": ch03_unmasking,
    "ch07_exercise_2_check": ch07_mse,
}
