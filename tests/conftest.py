"""Shared fixtures: the shipped target loaded once per session, and small random models."""
import pytest
import torch

from dflash_lite import load_pretrained

torch.set_num_threads(min(2, torch.get_num_threads()))


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
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
    path = tmp_path_factory.mktemp("llama")
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
