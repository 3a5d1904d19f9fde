"""The drafter's training loss (docs/method.md#training; weights :func:`position_weights`), the
teacher-forced accuracy of each position (:func:`position_accuracy`), and the :class:`FeatureCache`
of the frozen target's features."""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

from ..decoding.target import context_features
from .data import IGNORE, Batch, RegeneratedData, make_batch

GAMMA = {16: 7.0, 10: 5.0, 8: 4.0}   # the paper's decay for its block sizes


def loss_gamma(block_size: int) -> float:
    """Decay constant for the position weights; the paper's values, else (B - 2) / 2."""
    return GAMMA.get(block_size, max(1.0, (block_size - 2) / 2))


def position_weights(block_size: int, gamma: float | None = None) -> torch.Tensor:
    """w_k = exp(-(k-1)/gamma) for masked positions k = 1..B-1: (B-1,)."""
    gamma = loss_gamma(block_size) if gamma is None else gamma
    k = torch.arange(1, block_size, dtype=torch.float32)
    return torch.exp(-(k - 1) / gamma)


class FeatureCache:
    """The frozen target's features of each training sequence, computed the first time a batch holds
    it and reused every later epoch (on a real target its forward is most of a step's cost); kept in
    the target's dtype up to ``max_bytes``, past which they are computed each time."""

    def __init__(self, target, layer_ids: list[int], data: RegeneratedData,
                 max_bytes: int = 4 << 30):
        self.target, self.layer_ids, self.max_bytes = target, layer_ids, max_bytes
        self.lengths = [len(s) for s in data.sequences]
        self.kept: dict[int, torch.Tensor] = {}      # sequence index -> (its length, K*H)
        self.bytes = 0

    @torch.no_grad()
    def __call__(self, batch: Batch, dtype: torch.dtype) -> torch.Tensor:
        seq = batch.sequence_ids
        found = {r: self.kept[r] for r in batch.rows if r in self.kept}
        missing = [i for i, r in enumerate(batch.rows) if r not in found]
        if missing:
            out = self.target.model(seq[missing].to(self.target.device), output_hidden_states=True)
            features = context_features(out.hidden_states, self.layer_ids)
            for j, i in enumerate(missing):
                r = batch.rows[i]
                found[r] = features[j, :self.lengths[r]].clone()
                size = found[r].numel() * found[r].element_size()
                if self.bytes + size <= self.max_bytes:
                    self.kept[r] = found[r]
                    self.bytes += size
        # past a sequence's end is padding, which no block sees
        return torch.stack([F.pad(found[r], (0, 0, 0, seq.shape[1] - found[r].shape[0]))
                            for r in batch.rows]).to(dtype)


def labelled_logits(drafter, target, batch: Batch, block_size: int,
                    features: FeatureCache | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One training forward of every block: logits (M, V), labels (M,) and block positions (M,) of
    the M labelled positions. The target is frozen; the LM head runs only at labels (anchors,
    padding blocks and positions past a response's end would cost rows x vocabulary for nothing)."""
    device = next(drafter.parameters()).device
    # the drafter's dtype; the target may run in another (bf16 on a GPU)
    dtype = next(drafter.parameters()).dtype
    with torch.no_grad():
        seq = batch.sequence_ids.to(device)
        if features is not None and batch.rows is not None:
            features = features(batch, dtype).to(device)
        else:
            features = context_features(target.model(seq, output_hidden_states=True).hidden_states,
                                        drafter.config.target_layer_ids).to(dtype)  # (N, T, K*H)
        embeds = target.get_input_embeddings()(batch.block_ids.to(device)).to(dtype)
    context_positions = torch.arange(seq.shape[1], device=device)[None].expand(seq.shape[0], -1)
    hidden = drafter(embeds, features, batch.block_positions.to(device), context_positions, None,
                     batch.attn_mask.to(device))                                 # (N, A*B, H)
    labels = batch.labels.to(device)
    k = (torch.arange(labels.shape[1], device=device) % block_size).expand_as(labels)   # in block
    valid = labels != IGNORE
    head = target.get_output_embeddings()
    return head(hidden[valid].to(head.weight.dtype)), labels[valid], k[valid]


def drafter_loss(drafter, target, batch: Batch, weights: torch.Tensor,
                 features: FeatureCache | None = None) -> tuple[torch.Tensor, dict]:
    """Weighted CE over the masked positions of every block; per-position accuracy in metrics."""
    block_size = weights.shape[0] + 1
    logits, label, position = labelled_logits(drafter, target, batch, block_size, features)
    # the j-th prediction of a block (j = 1..B-1) gets weight w_j (B,): at block position j for
    # block drafting, at position j-1 for autoregressive drafting (each token predicts the next)
    first = 0 if drafter.autoregressive else 1
    w = F.pad(weights.to(logits.device), (first, 1 - first))
    ce = F.cross_entropy(logits.float(), label, reduction="none")
    loss = (ce * w[position]).sum() / w[position].sum()
    with torch.no_grad():
        correct = logits.argmax(-1) == label
        acc = [correct[position == j].float().mean().item() if (position == j).any() else 0.0
               for j in range(first, first + block_size - 1)]
    return loss, {"loss": loss.item(), "accuracy_per_position": acc}


@torch.no_grad()
def position_accuracy(drafter, target, data: RegeneratedData, pad_token_id: int,
                      num_anchors: int = 16, anchor_token: bool = True) -> list[float]:
    """Teacher-forced accuracy of each of a drafter's B-1 predictions on ``data``, at random anchors
    as in training (an autoregressive drafter's j-th prediction sees the real tokens before it).
    ``anchor_token=False`` (block drafting only) puts MASK in slot 0 too, which shows what the
    drafter takes from the last committed token."""
    if not anchor_token and drafter.autoregressive:
        raise ValueError("anchor_token=False is for block drafting: an autoregressive drafter's "
                         "slot 0 is its input")
    block_size = drafter.config.block_size
    tokens = SimpleNamespace(mask_token_id=drafter.config.mask_token_id, pad_token_id=pad_token_id)
    batch = make_batch(data.sequences, data.prompt_lengths, block_size, num_anchors, tokens,
                       torch.Generator().manual_seed(0), causal=drafter.autoregressive)
    if batch is None:
        raise ValueError("no sequence has a response long enough for a block")
    if not anchor_token:
        batch.block_ids[:, ::block_size] = drafter.config.mask_token_id
    was_training = drafter.training
    _, metrics = drafter_loss(drafter.eval(), target, batch, position_weights(block_size))
    drafter.train(was_training)
    return metrics["accuracy_per_position"]
