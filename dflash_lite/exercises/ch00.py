"""Self-checks for notebook 00, a tour of the box."""
from __future__ import annotations

import random
import re

import torch

from .. import corpus
from ..decoding.acceptance import SamplingParams
from ..decoding.baselines import generate_autoregressive
from ..decoding.checkpoints import load_drafter
from ..decoding.decode import DFlashProposer, generate
from ..decoding.target import default_drafter_path, load_pretrained, stop_token_ids
from . import attempt, correct, forward_inputs, shipped_target

# the notebook's held-out problem: corpus.math_problem(HELD_OUT_SEED + 42)
TOUR_SEED_OFFSET = 42
TOUR_MAX_NEW_TOKENS = 64


def _tour_prompt_ids():
    _, tokenizer = shipped_target()
    problem = corpus.math_problem(corpus.HELD_OUT_SEED + TOUR_SEED_OFFSET)
    return tokenizer(problem.prompt, return_tensors="pt").input_ids


@attempt("Exercise 1", "Give a pair (autoregressive forwards, DFlash forwards).")
def check_target_forwards(answer) -> bool:
    """Exercise 1: ``(autoregressive, dflash)``, the target forwards (prefill included) each method
    makes on the notebook's held-out problem with ``max_new_tokens=64`` and the stop tokens."""
    model, tokenizer = shipped_target()
    ids, stops = _tour_prompt_ids(), stop_token_ids(model, tokenizer)
    drafter = load_drafter(default_drafter_path("tiny"))
    ar = len(forward_inputs(model, lambda: generate_autoregressive(
        model, ids, TOUR_MAX_NEW_TOKENS, stop_token_ids=stops)))
    sd = len(forward_inputs(model, lambda: generate(
        model, DFlashProposer(drafter, model), ids, TOUR_MAX_NEW_TOKENS, stop_token_ids=stops)))
    assert isinstance(answer, (tuple, list)) and len(answer) == 2, \
        "give two numbers: (autoregressive, DFlash)"
    answer = tuple(int(a) for a in answer)
    assert answer[0] == ar, (f"autoregressive: {answer[0]} is not what a hook on the target "
                             "counts. Hint: the prefill writes the first token; each later token "
                             "costs one forward.")
    assert answer[1] == sd, (f"DFlash: {answer[1]} is not what a hook on the target counts. "
                             "Hint: one prefill, then one verification per step "
                             "(len(acceptance_lengths)).")
    return correct("Exercise 1", f"{ar} target forwards autoregressively, {sd} with DFlash, "
                                 "for the same tokens.")


@attempt("Exercise 2", "Give the number of distinct completions among seeds 0..9.")
def check_distinct_samples(answer) -> bool:
    """Exercise 2: how many distinct completions seeds 0..9 give, sampling the notebook's problem
    (temperature 0.8, top-p 0.9, 32 new tokens, one ``torch.Generator`` per seed)."""
    model, tokenizer = shipped_target()
    ids, stops = _tour_prompt_ids(), stop_token_ids(model, tokenizer)
    params = SamplingParams(temperature=0.8, top_p=0.9)

    def sample(seed):
        return tuple(generate_autoregressive(model, ids, 32, params, stop_token_ids=stops,
                                             generator=torch.Generator().manual_seed(seed)).tokens)

    runs = [sample(seed) for seed in range(10)]
    assert sample(0) == runs[0], \
        "the same seed gave different tokens: sampling is not reproducible here"
    expected = len(set(runs))
    assert int(answer) == expected, (f"{answer} distinct completions is not what seeds 0..9 give. "
                                     "Hint: pass a fresh torch.Generator().manual_seed(seed) per "
                                     "run and compare the token lists.")
    return correct("Exercise 2", f"{expected} distinct completions out of 10; "
                                 "the same seed always repeats itself.")


_ARITHMETIC = re.compile(r"(-?\d+(?:\.\d+)?)\s*([-+*/])\s*(-?\d+(?:\.\d+)?)"
                         r"\s*=\s*(-?\d+(?:\.\d+)?)")


@attempt("Exercise 3", "Write template(r) -> corpus.MathProblem and pass the function.")
def check_math_template(template) -> bool:
    """Exercise 3: a new ``template(r: random.Random) -> corpus.MathProblem``: deterministic per
    seed, varied, with correct arithmetic and a parseable answer."""
    problems = [template(random.Random(seed)) for seed in range(20)]
    assert all(isinstance(p, corpus.MathProblem) for p in problems), "return a corpus.MathProblem"
    assert problems == [template(random.Random(seed)) for seed in range(20)], \
        "the same seed must give the same problem: draw only from r"
    assert len({p.question for p in problems}) >= 10, \
        "20 seeds gave fewer than 10 different questions: use r more"
    for p in problems:
        assert p.solution.rstrip().endswith(f"The answer is {p.answer}."), \
            f"the solution must end with 'The answer is {p.answer}.': {p.solution!r}"
        assert corpus.final_answer(p.text) == p.answer, \
            f"corpus.final_answer does not read {p.answer} from {p.text!r}"
        for a, op, b, result in _ARITHMETIC.findall(p.solution):
            value = {"+": float(a) + float(b), "-": float(a) - float(b), "*": float(a) * float(b),
                     "/": float(a) / float(b) if float(b) else float("nan")}[op]
            assert abs(value - float(result)) < 1e-9, \
                f"wrong arithmetic in the solution: {a} {op} {b} = {result}"
    return correct("Exercise 3", f"20 problems, {len({p.question for p in problems})} different, "
                                 "all parse and add up.")


@attempt("Exercise 4", "Save a LlamaForCausalLM and a tokenizer to a directory and pass its path.")
def check_llama_parity(path) -> bool:
    """Exercise 4: a local Llama directory (config, safetensors, tokenizer) that ``load_pretrained``
    opens, on which the project's loop gives exactly ``model.generate``'s greedy tokens."""
    model, tokenizer = load_pretrained(path)
    assert type(model).__name__ == "LlamaForCausalLM", \
        f"{path} holds a {type(model).__name__}, not a Llama"
    stops = stop_token_ids(model, tokenizer)
    prompts = [p.prompt for p in corpus.math_problems(2, split="held_out", start=300)]
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        ours = generate_autoregressive(model, ids, 16, stop_token_ids=stops).tokens
        ref = model.generate(ids, do_sample=False, max_new_tokens=16, eos_token_id=stops,
                             pad_token_id=tokenizer.pad_token_id)[0, ids.shape[1]:].tolist()
        assert ours == ref, "the project's loop and model.generate disagree on this model"
    return correct("Exercise 4", f"a {model.config.num_hidden_layers}-layer Llama loads offline "
                                 f"and matches model.generate on {len(prompts)} prompts.")
