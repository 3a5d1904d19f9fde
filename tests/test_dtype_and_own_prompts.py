"""bf16 (and the --dtype option everywhere), and training a drafter on your own prompts.

Greedy speculative decoding in bf16 is compared with the target's own greedy decoding in bf16.
Both sides use the same weights and dtype, but a verify forward over B tokens and a forward over
one token do not round alike; where the target's two best logits are within bf16 rounding of
each other, the two loops may pick different (equally likely) tokens. The test asserts identity
everywhere else, and that such a divergence is a genuine tie.
"""
import json
import shutil

import pytest
import torch

from dflash_lite import corpus, load_pretrained, stop_token_ids
from dflash_lite.decoding.baselines import generate_autoregressive
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.decode import DFlashProposer, generate
from dflash_lite.decoding.target import SHIPPED, default_drafter_path, parse_dtype


@pytest.fixture(scope="module")
def tiny_bf16():
    return load_pretrained("tiny", dtype="bfloat16")


def bf16_tie(logits: torch.Tensor) -> bool:
    """The two best logits are within 4 bf16 rounding steps (8 mantissa bits) of each other."""
    top = logits.float().topk(2).values
    step = 2.0 ** (torch.floor(torch.log2(top[0].abs())) - 7)
    return bool(top[0] - top[1] <= 4 * step)


def test_bf16_greedy_speculative_output_is_the_targets_greedy_output(tiny_bf16):
    target, tokenizer = tiny_bf16
    drafter = load_drafter(default_drafter_path("tiny"), dtype="bfloat16")
    assert next(target.parameters()).dtype == next(drafter.parameters()).dtype == torch.bfloat16
    stops = stop_token_ids(target, tokenizer)
    prompts = [p.prompt for p in corpus.math_problems(3, split="held_out", start=40)] + ["def walk(tree):\n"]
    identical = 0
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
        ours = generate(target, DFlashProposer(drafter, target), ids, 48, stop_token_ids=stops)
        reference = generate_autoregressive(target, ids, 48, stop_token_ids=stops).tokens
        if ours.tokens == reference:
            identical += 1
            continue
        first = next(i for i, (a, b) in enumerate(zip(ours.tokens, reference)) if a != b)
        with torch.no_grad():
            logits = target(torch.cat([ids, torch.tensor([reference[:first]])], dim=1)).logits[0, -1]
        assert bf16_tie(logits), f"{prompt!r}: bf16 outputs differ at token {first} without a tie"
    assert identical >= 3                        # the math prompts have no tie within 48 tokens
    assert ours.tau > 1                          # the drafter did draft, in bf16


def test_dtype_names_and_their_errors():
    assert parse_dtype("bfloat16") is torch.bfloat16 and parse_dtype(None) is torch.float32
    assert parse_dtype(torch.float16) is torch.float16
    with pytest.raises(ValueError, match="float32, bfloat16, float16"):
        parse_dtype("float64")


def test_cli_refuses_an_unknown_dtype(capsys):
    from dflash_lite.cli import main

    for command in ("demo", "bench", "train --out x"):
        with pytest.raises(SystemExit):
            main([*command.split(), "--dtype", "float64"])
        assert "invalid choice: 'float64'" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_and_bench_run_in_bf16(capsys):
    from dflash_lite.measuring.benchmark import bench
    from dflash_lite.measuring.report import Kind, row_of
    from dflash_lite.cli import demo

    summary = demo(max_new_tokens=8, repeats=1, dtype="bfloat16")
    assert summary["DFlash"]["tokens"] == summary["autoregressive"]["tokens"]
    assert "bfloat16" in capsys.readouterr().out
    report = bench(num_prompts=1, domain="math", max_new_tokens=8, repeats=1, dtype="bfloat16", quiet=True,
                   baselines=False, cost_repeats=1)
    assert report["env"]["dtype"] == "bfloat16"
    ours = row_of(report, Kind.DFLASH, block_size=16)
    assert ours["identical_to_target"] and ours["error"] is None
    assert row_of(report, Kind.HF_DFLASH, block_size=16)["error"] is None


def test_engine_takes_a_dtype():
    from dflash_lite.decoding.engine import Engine

    engine = Engine.from_pretrained("tiny", drafter=str(default_drafter_path("tiny")), dtype="bfloat16")
    assert engine.target.dtype == next(engine.drafter.parameters()).dtype == torch.bfloat16
    assert engine.generate("def walk(tree):\n", max_new_tokens=8)


# ----------------------------------------------------------------------------- your own prompts
TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}" \
           "{% if add_generation_prompt %}<|assistant|>{% endif %}"


@pytest.fixture
def chat_target(tmp_path):
    """The shipped target in a local directory whose tokenizer has a chat template."""
    from transformers import AutoTokenizer

    path = tmp_path / "chat-target"
    shutil.copytree(SHIPPED["tiny"], path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(path)
    return path


def write_prompts(path, n):
    rows = [{"turns": ["def merge(left, right):\n", "and now in C"]}]
    rows += [{"prompt": p.prompt} for p in corpus.math_problems(n - 1, split="train", start=900_000)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def test_apply_chat_template_only_when_there_is_one(chat_target, tiny):
    from transformers import AutoTokenizer

    from dflash_lite.prompts import apply_chat_template

    _, plain = tiny
    assert apply_chat_template(plain, ["2+2?"]) == ["2+2?"]
    templated = apply_chat_template(AutoTokenizer.from_pretrained(chat_target), ["2+2?"])
    assert templated == ["<|user|>2+2?\n<|assistant|>"]


@pytest.mark.slow
def test_train_on_a_prompts_file_with_a_chat_template_in_bf16(chat_target, tmp_path):
    from dflash_lite.training.train import train_drafter

    prompts = write_prompts(tmp_path / "prompts.jsonl", 6)
    out = train_drafter(target=str(chat_target), out=str(tmp_path / "drafter"), prompts=str(prompts), steps=2,
                        batch_size=2, num_anchors=2, block_size=4, layers=1, max_new_tokens=8, eval_every=0,
                        probe_prompts=1, cache_dir=str(tmp_path / "cache"), dtype="bfloat16")
    meta = json.loads((out / "training_curve.json").read_text())["training"]
    assert meta["sequences"] == 5 and meta["chat_template"] and meta["dtype"] == "bfloat16"
    assert set(meta["final_tau_probe"]) == {"held_out", "all"}
    _, tokenizer = load_pretrained(chat_target)
    cached = json.loads(next((tmp_path / "cache").glob("regenerated-*.json")).read_text())
    first = tokenizer.decode(cached["sequences"][0][:cached["prompt_lengths"][0]])
    assert first.startswith("<|user|>") and first.endswith("<|assistant|>")       # what the target answered
    assert "def merge" in tokenizer.decode(cached["sequences"][0])                 # the 'turns' row, first turn
    assert load_drafter(out).config.block_size == 4


def test_train_prompt_errors_come_before_any_work(tmp_path):
    from dflash_lite.training.train import train_drafter

    with pytest.raises(ValueError, match="no such prompts file"):
        train_drafter(out=str(tmp_path / "d"), prompts=str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="unknown dataset"):
        train_drafter(out=str(tmp_path / "d"), dataset="not-a-set")
    few = write_prompts(tmp_path / "few.jsonl", 2)
    with pytest.raises(ValueError, match="held out"):
        train_drafter(out=str(tmp_path / "d"), prompts=str(few), probe_prompts=4)
