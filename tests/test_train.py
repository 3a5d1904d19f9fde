"""Drafter training: anchors, the block mask, the loss weights, and that training learns."""
import math
from types import SimpleNamespace

import pytest
import torch
from drafting_checks import assert_training_forward_equals_inference

from dflash_lite.decoding.checkpoints import load_drafter, save_drafter
from dflash_lite.decoding.drafter import DrafterConfig
from dflash_lite.decoding.target import context_features
from dflash_lite.training.data import IGNORE, block_attention_mask, epoch_batches, make_batch, sample_anchors
from dflash_lite.training.train import FeatureCache, drafter_loss, position_weights
from dflash_lite.training.trainer import TrainConfig, Trainer
from dflash_lite.decoding.variants import make_drafter


def test_anchors_stay_inside_the_response_and_leave_a_label():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        plen, length = int(torch.randint(1, 20, (1,))), int(torch.randint(2, 60, (1,)))
        anchors = sample_anchors(plen, length, 8, g)
        assert all(plen <= a <= length - 2 for a in anchors.tolist())
        assert len(set(anchors.tolist())) == len(anchors)
    assert len(sample_anchors(10, 11, 4, g)) == 0          # no response token with a label after it


def test_block_mask_on_a_hand_worked_case():
    # context of 5 positions, blocks of 3 anchored at positions 2 and 4
    mask = block_attention_mask(torch.tensor([2, 4]), 5, 3).int()
    expected = torch.tensor([
        # ctx 0 1 2 3 4 | block0 | block1
        [1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0],
        [1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0],
        [1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1],
        [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1],
        [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1],
    ])
    assert torch.equal(mask, expected)


def test_blocks_never_see_their_own_labels():
    g = torch.Generator().manual_seed(1)
    seq = list(range(10, 40))
    batch = make_batch([seq], [8], 4, 6, SimpleNamespace(mask_token_id=1, pad_token_id=0), g)
    q = batch.block_ids.shape[1]
    for row in range(q):
        label_pos = int(batch.block_positions[0, row])
        if batch.labels[0, row] == IGNORE:
            continue
        visible_context = batch.attn_mask[0, 0, row, : len(seq)].nonzero().flatten()
        assert visible_context.numel() == 0 or int(visible_context.max()) < label_pos - (row % 4)
        assert batch.labels[0, row] == seq[label_pos]


@pytest.mark.parametrize("block_size,gamma", [(16, 7), (10, 5), (8, 4)])
def test_loss_weights_match_the_formula(block_size, gamma):
    w = position_weights(block_size)
    assert w.shape == (block_size - 1,)
    for k in range(1, block_size):
        assert math.isclose(float(w[k - 1]), math.exp(-(k - 1) / gamma), rel_tol=1e-6)


@pytest.fixture(scope="module")
def toy_data(tiny):
    """Responses of the target to a few math prompts (no cache, so the test regenerates them)."""
    from dflash_lite.training.data import regenerate
    from dflash_lite.prompts import training_prompts
    target, tokenizer = tiny
    return regenerate(target, tokenizer, training_prompts(8, 0), 48, batch_size=8)


@pytest.mark.parametrize("conditioning", ["kv_injection", "input_fusion", "none"])
def test_training_forward_equals_the_inference_draft(tiny, toy_data, conditioning):
    """Every block inside the training batch gives exactly the logits of drafting it at inference,
    with the context fed in two pieces through the drafter cache, as the decode loop does."""
    target, tokenizer = tiny
    torch.manual_seed(0)
    drafter = make_drafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=2,
                                                      block_size=4, conditioning=conditioning)).eval()
    seq, plen = toy_data.sequences[0], toy_data.prompt_lengths[0]
    g = torch.Generator().manual_seed(3)
    batch = make_batch([seq], [plen], 4, 3, tokenizer, g)
    assert_training_forward_equals_inference(drafter, target, batch)


def test_no_target_features_means_the_token_embeddings(tiny):
    """The 'none' ablation taps index 0 of the hidden states: the embedding output, no target layer."""
    from dflash_lite.decoding.decode import new_cache, verify

    target, tokenizer = tiny
    config = DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=1, conditioning="none")
    assert config.target_layer_ids == [-1] and config.num_context_features == target.config.hidden_size
    ids = tokenizer("Question: 2 + 3?", return_tensors="pt").input_ids
    _, features = verify(target, ids, new_cache(target), config.target_layer_ids)
    torch.testing.assert_close(features, target.get_input_embeddings()(ids))
    with pytest.raises(ValueError, match="conditioning"):
        DrafterConfig.from_target(target.config, 1, conditioning="fusion")


def test_fixed_anchors_sit_on_block_boundaries():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        plen, length = int(torch.randint(1, 20, (1,))), int(torch.randint(30, 90, (1,)))
        anchors = sample_anchors(plen, length, 4, g, block_size=8)
        assert all((a - plen) % 8 == 0 and plen <= a <= length - 2 for a in anchors.tolist())


@pytest.mark.slow
def test_a_few_steps_reduce_the_loss_and_only_the_drafter_trains(tiny, toy_data):
    target, tokenizer = tiny
    torch.manual_seed(0)
    drafter = make_drafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=1,
                                                      block_size=4)).train()
    before_target = {k: v.clone() for k, v in target.state_dict().items()}
    weights = position_weights(4)
    g = torch.Generator().manual_seed(0)
    fixed = make_batch(toy_data.sequences, toy_data.prompt_lengths, 4, 8, tokenizer, g)
    first = drafter_loss(drafter, target, fixed, weights)[0].item()
    trainer = Trainer(drafter, lambda m, b: drafter_loss(m, target, b, weights), lambda: iter([fixed] * 1000),
                      TrainConfig(steps=25, lr=3e-3, log_every=5))
    trainer.run()
    last = drafter_loss(drafter, target, fixed, weights)[0].item()
    assert last < 0.8 * first
    assert all(torch.equal(v, target.state_dict()[k]) for k, v in before_target.items())
    assert len(trainer.history) == 5 and len(trainer.history[-1]["accuracy_per_position"]) == 3


@pytest.mark.slow
def test_trained_drafter_saved_and_loaded_gives_identical_logits(tiny, toy_data, tmp_path):
    target, tokenizer = tiny
    torch.manual_seed(0)
    drafter = make_drafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=1,
                                                      block_size=4)).train()
    g = torch.Generator().manual_seed(0)
    weights = position_weights(4)
    Trainer(drafter, lambda m, b: drafter_loss(m, target, b, weights),
            lambda: epoch_batches(toy_data, 4, 4, 4, tokenizer, g),
            TrainConfig(steps=5)).run()
    drafter.eval()
    save_drafter(drafter, tmp_path)
    loaded = load_drafter(tmp_path)
    ids = torch.tensor([toy_data.sequences[1]])
    with torch.no_grad():
        out = target(ids, output_hidden_states=True)
    features = context_features(out.hidden_states, drafter.config.target_layer_ids)
    block = torch.tensor([[ids[0, -1].item()] + [tokenizer.mask_token_id] * 3])
    assert torch.equal(drafter.draft_logits(target, block, features, 0), loaded.draft_logits(target, block, features, 0))


@pytest.mark.slow
def test_trainer_resumes_from_its_checkpoint(tiny, toy_data, tmp_path):
    target, tokenizer = tiny
    weights = position_weights(4)

    def make(steps):
        torch.manual_seed(0)
        d = make_drafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=1,
                                                    block_size=4)).train()
        g = torch.Generator().manual_seed(0)
        fixed = make_batch(toy_data.sequences, toy_data.prompt_lengths, 4, 4, tokenizer, g)
        return Trainer(d, lambda m, b: drafter_loss(m, target, b, weights), lambda: iter([fixed] * 100),
                       TrainConfig(steps=steps, log_every=1), checkpoint_dir=tmp_path)

    make(3).run()
    resumed = make(6)
    assert resumed.step == 3
    resumed.run()
    assert resumed.step == 6 and [h["step"] for h in resumed.history] == [1, 2, 3, 4, 5, 6]


def test_autoregressive_baseline_training_forward_equals_its_inference_steps(tiny, toy_data):
    """EAGLE-style drafter: under teacher forcing, block position j of the causal training forward
    gives the logits that autoregressive drafting computes one token at a time."""
    from dflash_lite.decoding.cache import SlotCache

    target, tokenizer = tiny
    torch.manual_seed(0)
    drafter = make_drafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=2,
                                                      block_size=4, drafting="autoregressive")).eval()
    seq, plen = toy_data.sequences[2], toy_data.prompt_lengths[2]
    batch = make_batch([seq], [plen], 4, 2, tokenizer, torch.Generator().manual_seed(4), causal=True)
    with torch.no_grad():
        out = target.model(batch.sequence_ids, output_hidden_states=True)
        features = context_features(out.hidden_states, drafter.config.target_layer_ids)
        embeds = target.get_input_embeddings()(batch.block_ids)
        hidden = drafter(embeds, features, batch.block_positions, torch.arange(features.shape[1])[None], None,
                         batch.attn_mask)
        trained = target.get_output_embeddings()(hidden)[0, :3]
    anchor = int(batch.block_positions[0, 0])
    cache = SlotCache(2)
    steps, context = [], features[:, :anchor]
    for j in range(3):
        steps.append(drafter.next_token_logits(target, batch.block_ids[:, j:j + 1], context, 0, anchor + j, cache)[0])
        context = context[:, :0]
    torch.testing.assert_close(trained, torch.stack(steps), atol=1e-4, rtol=1e-4)
    assert int(batch.labels[0, 0]) == seq[anchor + 1]


def test_eagle_style_decoding_is_lossless(tiny):
    from dflash_lite import generate_autoregressive
    from dflash_lite.decoding.baselines import EagleProposer
    from dflash_lite.decoding.decode import DFlashProposer, generate

    target, tokenizer = tiny
    torch.manual_seed(0)
    drafter = make_drafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id, num_layers=1,
                                                      block_size=6, drafting="autoregressive")).eval()
    ids = tokenizer("Question: Ben has 4 cards and buys 3 more.\nAnswer:", return_tensors="pt").input_ids
    expected = generate_autoregressive(target, ids, 30).tokens
    from dflash_lite.decoding.decode import PerRow

    assert generate(target, PerRow(EagleProposer(drafter, target)), ids, 30).tokens == expected
    with pytest.raises(ValueError, match="DFlashProposer needs a block drafter"):
        DFlashProposer(drafter, target)


def test_position_accuracy_shows_what_slot_0_is_worth(tiny):
    """Teacher-forced accuracy per draft position on the target's own code continuations: the
    shipped drafter's first prediction needs the last committed token (slot 0); put MASK there and
    it falls. The autoregressive baseline has no separate slot 0, so masking it is refused."""
    from dflash_lite import corpus
    from dflash_lite.decoding.target import SHIPPED_BASELINES, default_drafter_path
    from dflash_lite.training.data import regenerate
    from dflash_lite.training.train import position_accuracy

    target, tokenizer = tiny
    drafter = load_drafter(default_drafter_path("tiny"))
    data = regenerate(target, tokenizer, corpus.prompts("held_out", "code", 8), 64)
    intact = position_accuracy(drafter, target, data, tokenizer.pad_token_id)
    masked = position_accuracy(drafter, target, data, tokenizer.pad_token_id, anchor_token=False)
    assert len(intact) == drafter.config.block_size - 1 and all(0 <= a <= 1 for a in intact + masked)
    assert masked[0] < intact[0] - 0.03
    eagle = load_drafter(SHIPPED_BASELINES["tiny"]["eagle"])
    assert len(position_accuracy(eagle, target, data, tokenizer.pad_token_id)) == eagle.config.block_size - 1
    with pytest.raises(ValueError, match="block drafting"):
        position_accuracy(eagle, target, data, tokenizer.pad_token_id, anchor_token=False)


def test_cached_target_features_give_the_loss_of_a_fresh_forward(tiny, toy_data):
    """A second epoch reads the features the first computed (in other batch company, other
    padding); the loss must be the one an uncached forward gives."""
    target, tokenizer = tiny
    torch.manual_seed(0)
    drafter = make_drafter(DrafterConfig.from_target(target.config, tokenizer.mask_token_id,
                                                      num_layers=1, block_size=4)).eval()
    weights = position_weights(4)
    cache = FeatureCache(target, drafter.config.target_layer_ids, toy_data)
    g = torch.Generator().manual_seed(0)
    for batch in epoch_batches(toy_data, 2, 4, 4, tokenizer, g):
        drafter_loss(drafter, target, batch, weights, cache)
    assert len(cache.kept) == len(toy_data)
    for batch in epoch_batches(toy_data, 3, 4, 4, tokenizer, g):          # other company
        cached = drafter_loss(drafter, target, batch, weights, cache)[0]
        fresh = drafter_loss(drafter, target, batch, weights)[0]
        assert torch.allclose(cached, fresh, atol=1e-5), (cached, fresh)
