"""A check two test files share: the block-masked training forward equals drafting at inference."""
import torch

from dflash_lite.decoding.cache import SlotCache
from dflash_lite.decoding.target import context_features


def assert_training_forward_equals_inference(drafter, target, batch, num_blocks: int = 3, block_size: int = 4):
    """Each of the batch's first ``num_blocks`` blocks, taken from one masked training forward, has
    the logits of drafting it at inference with its context fed in two pieces through the drafter
    cache, as the decode loop does."""
    with torch.no_grad():
        out = target.model(batch.sequence_ids, output_hidden_states=True)
        features = context_features(out.hidden_states, drafter.config.target_layer_ids)
        embeds = target.get_input_embeddings()(batch.block_ids)
        ctx_pos = torch.arange(batch.sequence_ids.shape[1])[None]
        hidden = drafter(embeds, features, batch.block_positions, ctx_pos, None, batch.attn_mask)
        trained = target.get_output_embeddings()(hidden)[0]
        for j in range(num_blocks):
            first = block_size * j
            block = batch.block_ids[:, first: first + block_size]
            anchor = int(batch.block_positions[0, first])
            cache, split = SlotCache(drafter.config.num_layers), anchor // 2
            drafter.draft_logits(target, block, features[:, :split], 0, cache)
            inference = drafter.draft_logits(target, block, features[:, split:anchor], split, cache)[0]
            torch.testing.assert_close(trained[first + 1: first + block_size], inference, atol=1e-4, rtol=1e-4)
