"""The paper's drafter and its ablations are separate classes (dflash_lite.decoding.variants), and every
saved drafter loads as the one it was trained as."""
import pytest
import torch

from dflash_lite import corpus, stop_token_ids
from dflash_lite.decoding.baselines import EagleProposer
from dflash_lite.decoding.checkpoints import load_drafter, save_drafter
from dflash_lite.decoding.decode import DFlashProposer, PerRow, generate
from dflash_lite.decoding.drafter import DFlashDrafter, DrafterConfig
from dflash_lite.decoding.variants import (
    AutoregressiveDrafter,
    InputFusionDrafter,
    NoFeatureDrafter,
    make_drafter,
)


@pytest.mark.parametrize("options, cls", [
    ({}, DFlashDrafter),
    ({"conditioning": "input_fusion"}, InputFusionDrafter),
    ({"conditioning": "none"}, NoFeatureDrafter),
    ({"drafting": "autoregressive"}, AutoregressiveDrafter),
    ({"drafting": "autoregressive", "conditioning": "none"}, AutoregressiveDrafter),
])
def test_a_config_builds_its_own_drafter_and_a_saved_one_loads_as_it(tiny, tmp_path, options, cls):
    target, tokenizer = tiny
    config = DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=1, block_size=4, **options)
    drafter = make_drafter(config)
    assert type(drafter) is cls
    save_drafter(drafter, tmp_path / "d")
    loaded = load_drafter(tmp_path / "d")
    assert type(loaded) is cls
    for name, tensor in drafter.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor)


@pytest.mark.parametrize("options", [{"conditioning": "input_fusion"}, {"drafting": "autoregressive"}])
def test_the_papers_drafter_refuses_an_ablation_config_in_one_line(tiny, options):
    target, tokenizer = tiny
    config = DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=1, **options)
    with pytest.raises(ValueError, match="make_drafter") as error:
        DFlashDrafter(config)
    assert "\n" not in str(error.value)


def test_shipped_drafters_load_as_their_variant():
    assert type(load_drafter("dflash_lite/models/tiny-dflash")) is DFlashDrafter
    assert type(load_drafter("dflash_lite/models/tiny-eagle")) is AutoregressiveDrafter


def test_eagle_drafts_leave_only_accepted_context_in_the_drafter_cache(tiny):
    """The autoregressive drafter keeps each draft's K/V while it drafts; after the round its cache
    holds exactly the accepted positions (0 .. the last token's position - 1), and the shipped
    EAGLE-style drafter is still accepted far more often than a random one would be."""
    target, tokenizer = tiny
    drafter = load_drafter("dflash_lite/models/tiny-eagle")
    lengths, stops = [], stop_token_ids(target, tokenizer)

    class Checked(EagleProposer):
        def propose(self, last_token, k):
            position = self.new_context_start + self.new_context.shape[1]
            draft = super().propose(last_token, k)
            assert self.cache.position == position and len(draft.tokens) == k
            return draft

    for prompt in corpus.prompts("held_out", "math", 2):
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
        lengths += generate(target, PerRow(Checked(drafter, target)), ids, 48, stop_token_ids=stops).acceptance_lengths
    assert sum(lengths) / len(lengths) > 4        # measured 12.0 (these 2 prompts x 48 tokens)
    with pytest.raises(ValueError, match="DFlashProposer needs a block drafter"):
        DFlashProposer(drafter, target)
