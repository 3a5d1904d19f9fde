"""Shared fixtures: the shipped target loaded once per session, and small random models.

(The repository's top-level conftest.py keeps every test's outputs out of the working tree.)
"""
import copy
import pickle
from pathlib import Path

import pytest
import torch

from dflash_lite import load_pretrained

torch.set_num_threads(min(2, torch.get_num_threads()))


def pytest_collection_modifyitems(items):
    """A test that decodes the 50 greedy cases (directly or through a module's ``cases``) is one of
    the 50-prompt identity grids: slow. ``python -m pytest -m "not slow"`` leaves them out. A test
    marked ``gpu`` is skipped without CUDA."""
    no_cuda = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "greedy_cases" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(no_cuda)


@pytest.fixture(params=["eager", "fixed"])
def shapes(request):
    """The one decode loop's two modes (dflash_lite.decoding.shapes): eager, and fixed shapes (padded
    verify widths, whole-buffer masks, chunked drafter context) with eager forwards. The compiled
    forwards have tests of their own (tests/test_fixed_shapes.py)."""
    from dflash_lite.decoding.shapes import EAGER, FixedShapes
    return EAGER if request.param == "eager" else FixedShapes(512)


@pytest.fixture(scope="session")
def tiny():
    """The shipped target and its tokenizer, fp32 on CPU."""
    return load_pretrained("tiny")


@pytest.fixture(scope="session")
def random_llama(tmp_path_factory):
    """A small random LlamaForCausalLM saved as a local HF directory, with the shipped tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tokenizer = load_pretrained("tiny")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
    path = tmp_path_factory.mktemp("llama")
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def random_drafter(tiny):
    """An untrained DFlash drafter for the shipped target: acceptance is low, so rollback runs a lot."""
    from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig

    target, tokenizer = tiny
    torch.manual_seed(1)
    config = DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=2, block_size=16)
    return DFlashDrafter(config).eval()


@pytest.fixture(scope="session")
def noisy_draft_model(tiny):
    """A copy of the target with noise added to its weights: it agrees with the target often but
    not always, so speculative steps accept partial blocks."""
    target, _ = tiny
    model = copy.deepcopy(target)
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.3 * p.std())
    return model.eval()


@pytest.fixture(scope="session")
def greedy_cases(tiny):
    """``make(max_new_tokens, math_start, code_seed)``: 25 held-out math problems (from generator
    offset ``math_start``) and 25 held-out stdlib headers (sampled with ``code_seed``), each with the
    target's own greedy continuation, as ``(input_ids, tokens)`` pairs."""
    from dflash_lite import corpus, generate_autoregressive, stop_token_ids

    target, tokenizer = tiny
    stops = stop_token_ids(target, tokenizer)

    def make(max_new_tokens: int, math_start: int, code_seed: int) -> list:
        prompts = [p.prompt for p in corpus.math_problems(25, split="held_out", start=math_start)]
        prompts += corpus.function_headers(corpus.stdlib_files("held_out"), 25, seed=code_seed)
        ids = [tokenizer(prompt, return_tensors="pt").input_ids for prompt in prompts]
        return [(x, generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops).tokens) for x in ids]
    return make


# ----------------------------------------------------------------------------- checkpoints never run code
class Payload:
    """Unpickling this creates a marker file: proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


@pytest.fixture
def planted(tmp_path):
    run = tmp_path / "downloaded-run"
    (run / "checkpoint").mkdir(parents=True)
    marker = tmp_path / "code-ran"
    (run / "checkpoint" / "trainer.pt").write_bytes(pickle.dumps(Payload(marker)))
    return run, marker
