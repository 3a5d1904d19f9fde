"""SmolLM2-135M-Instruct, a real public target (`python -m dflash_lite zoo get smollm2-135m`):
greedy output identical to the target's for the chain, the tree and the policy, and its drafter's
public export read back as the same drafter. Skipped, with one line, when the model is not
fetched (CI fetches it first when its budget allows)."""
import pytest
import torch

from dflash_lite import generate_autoregressive, stop_token_ids
from dflash_lite.decoding.checkpoints import export_dflash, import_dflash, load_drafter
from dflash_lite.decoding.decode import DFlashProposer, generate
from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig
from dflash_lite.decoding.engine import Engine
from dflash_lite.prompts import encode
from dflash_lite.decoding.target import SHIPPED_DRAFTERS, fetched_dir, load_pretrained, mask_token_id
from dflash_lite.decoding.tree import DFlashTreeProposer

pytestmark = [pytest.mark.real, pytest.mark.skipif(
    not (fetched_dir("smollm2-135m") / "config.json").is_file(),
    reason="SmolLM2-135M is not fetched (python -m dflash_lite zoo get smollm2-135m)")]

PROMPTS = ["Tom has 7 apples and buys 5 more. How many apples does he have now?",
           "Write a Python function that returns the sum of the squares of a list of numbers."]
MAX_NEW = 24


@pytest.fixture(scope="module")
def smol():
    torch.manual_seed(0)
    target, tokenizer = load_pretrained("smollm2-135m", dtype="float32")
    shipped = SHIPPED_DRAFTERS.get("smollm2-135m")
    if shipped is not None and shipped.is_dir():
        drafter = load_drafter(shipped)
    else:                      # an untrained drafter: low acceptance, so rollback runs a lot
        mask = mask_token_id(tokenizer)
        drafter = DFlashDrafter(DrafterConfig.from_target(target.config, mask, num_layers=1,
                                                          block_size=8)).eval()
    return target, tokenizer, drafter


@pytest.fixture(scope="module")
def expected(smol):
    target, tokenizer, _ = smol
    stops = stop_token_ids(target, tokenizer)
    return [(ids, generate_autoregressive(target, ids, MAX_NEW, stop_token_ids=stops).tokens)
            for ids in (encode(tokenizer, p) for p in PROMPTS)]


def test_the_mask_token_is_a_reserved_id_the_target_does_not_emit(smol):
    _, tokenizer, drafter = smol
    assert tokenizer.mask_token_id is None
    assert drafter.config.mask_token_id == mask_token_id(tokenizer)
    assert drafter.config.mask_token_id not in {tokenizer.eos_token_id, tokenizer.bos_token_id,
                                                tokenizer.pad_token_id}


@pytest.mark.parametrize("scheme", ["chain", "tree"])
def test_chain_and_tree_are_the_targets_greedy_output(smol, expected, scheme):
    target, tokenizer, drafter = smol
    stops = stop_token_ids(target, tokenizer)
    for ids, tokens in expected:
        proposer = (DFlashProposer(drafter, target) if scheme == "chain"
                    else DFlashTreeProposer(drafter, target, 16, block_size=drafter.config.block_size))
        assert generate(target, proposer, ids, MAX_NEW, stop_token_ids=stops).tokens == tokens


def test_the_policy_gives_the_targets_greedy_text(smol, expected):
    target, tokenizer, drafter = smol
    engine = Engine(target, tokenizer, drafter)
    for prompt, (_, tokens) in zip(PROMPTS, expected):
        assert engine.generate(prompt, max_new_tokens=MAX_NEW) == tokenizer.decode(
            tokens, skip_special_tokens=True)


def test_the_public_export_reads_back_as_the_same_drafter(smol, tmp_path):
    _, _, drafter = smol
    export_dflash(drafter, tmp_path / "export", dtype=torch.float32)
    again = import_dflash(tmp_path / "export")
    assert again.config.mask_token_id == drafter.config.mask_token_id
    assert again.config.target_layer_ids == drafter.config.target_layer_ids
    mine, theirs = drafter.state_dict(), again.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k].float(), theirs[k].float()) for k in mine)
