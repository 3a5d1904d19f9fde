"""The autoregressive baseline: exact parity with transformers' generate, stops, limits, seeds."""
import pytest
import torch

from dflash_lite import (
    SamplingParams,
    corpus,
    generate_autoregressive,
    load_pretrained,
    stop_token_ids,
)


def parity_prompts(n_math: int, n_code: int) -> list[str]:
    math = [p.prompt for p in corpus.math_problems(n_math, split="held_out", start=500)]
    code = corpus.function_headers(corpus.stdlib_files("held_out"), n_code, seed=1)
    return math + code


@pytest.mark.slow
def test_greedy_matches_generate_token_for_token_on_50_prompts(tiny):
    model, tokenizer = tiny
    stops = stop_token_ids(model, tokenizer)
    prompts = parity_prompts(30, 20)
    assert len(prompts) == 50
    mismatches = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
        ours = generate_autoregressive(model, ids, 40, stop_token_ids=stops).tokens
        ref = model.generate(ids, do_sample=False, max_new_tokens=40, eos_token_id=stops,
                             pad_token_id=tokenizer.pad_token_id)[0, ids.shape[1]:].tolist()
        if ours != ref:
            mismatches.append(prompt[:40])
    assert mismatches == []


def test_greedy_matches_generate_for_a_llama_checkpoint(random_llama):
    model, tokenizer = load_pretrained(random_llama)
    assert type(model).__name__ == "LlamaForCausalLM"
    for seed in range(5):
        ids = torch.randint(10, len(tokenizer), (1, 6 + seed), generator=torch.Generator().manual_seed(seed))
        ours = generate_autoregressive(model, ids, 25).tokens
        ref = model.generate(ids, do_sample=False, max_new_tokens=25, eos_token_id=None,
                             pad_token_id=0)[0, ids.shape[1]:].tolist()
        assert ours == ref


def test_output_ends_exactly_at_the_stop_token(tiny):
    model, tokenizer = tiny
    ids = tokenizer(corpus.math_problem(corpus.HELD_OUT_SEED).prompt, return_tensors="pt").input_ids
    free = generate_autoregressive(model, ids, 60).tokens
    # make the 5th generated token a stop token: the output must end right there
    stop = free[4]
    result = generate_autoregressive(model, ids, 60, stop_token_ids=[stop])
    assert result.tokens == free[: free.index(stop) + 1]
    assert result.stop_reason == "stop_token"


@pytest.mark.parametrize("n", [1, 2, 7])
def test_exactly_max_new_tokens_without_a_stop(tiny, n):
    model, tokenizer = tiny
    ids = tokenizer("def f(x):\n", return_tensors="pt").input_ids
    result = generate_autoregressive(model, ids, n)
    assert len(result.tokens) == n == len(result.token_times)
    assert result.stop_reason == "max_new_tokens"
    assert result.token_times == sorted(result.token_times)


def test_sampling_is_deterministic_for_a_seed_and_varies_across_seeds(tiny):
    model, tokenizer = tiny
    ids = tokenizer("def ", return_tensors="pt").input_ids
    params = SamplingParams(temperature=1.0, top_k=50, top_p=0.95)

    def run(seed):
        return generate_autoregressive(model, ids, 30, params, generator=torch.Generator().manual_seed(seed)).tokens

    assert run(123) == run(123)
    assert len({tuple(run(s)) for s in range(4)}) > 1


@pytest.mark.parametrize("make_ids,max_new,match", [
    (lambda: torch.zeros((1, 0), dtype=torch.long), 5, "empty"),
    (lambda: torch.ones((1, 3), dtype=torch.long), 0, "max_new_tokens"),
    (lambda: torch.ones((1, 3), dtype=torch.long), -4, "max_new_tokens"),
    (lambda: torch.ones((1, 1000), dtype=torch.long), 100, "context"),
    (lambda: torch.ones((2, 3), dtype=torch.long), 5, "shape"),
])
def test_bad_requests_fail_with_one_clear_line(tiny, make_ids, max_new, match):
    model, _ = tiny
    with pytest.raises(ValueError, match=match) as info:
        generate_autoregressive(model, make_ids(), max_new)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kwargs", [{"temperature": -1.0}, {"temperature": 1.0, "top_k": 0},
                                    {"temperature": 1.0, "top_p": 0.0}, {"temperature": 1.0, "top_p": 1.5}])
def test_invalid_sampling_parameters_are_rejected(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)
