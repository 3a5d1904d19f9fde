"""Reference answers of the exercises: instructor-only (shipped neither in the student bundle nor
in the student package). The grader's hidden checks compare answers with these."""

from __future__ import annotations

import torch


def article_output(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """02, exercise 2: the exact output distribution of 'keep x ~ q if p(x) >= q(x), else
    resample from p'."""
    keep = (p >= q).to(p.dtype)
    return q * keep + (q * (1 - keep)).sum() * p


def lookup_draft(tokens: list[int], k: int, ngram: int = 2) -> list[int]:
    """02, exercise 4: the tokens after the most recent earlier occurrence of the last ngram
    tokens."""
    if len(tokens) <= ngram:
        return []
    tail = tokens[-ngram:]
    for start in range(len(tokens) - ngram - 1, -1, -1):
        if tokens[start : start + ngram] == tail:
            return tokens[start + ngram : start + ngram + k]
    return []


def mse_on_probs(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """07, exercise 2: position-weighted MSE between softmax(logits) and the one-hot labels."""
    onehot = torch.nn.functional.one_hot(labels, logits.shape[-1]).to(logits.dtype)
    per_position = ((logits.softmax(-1) - onehot) ** 2).mean(-1)  # (N, k)
    return (per_position * weights).sum(-1).mean() / weights.sum()


def unmasking_proposer():
    """03, exercise 5: one pass, keep the most confident half, re-mask the rest, one more pass."""
    from dflash_lite.decoding.decode import ChainDraft, DFlashProposer

    class ConfidenceUnmaskingProposer(DFlashProposer):
        def propose(self, last: torch.Tensor, depths: list[int]):  # one request: last (1,)
            k, start = depths[0], self.new_context_start[0]
            mask_id = self.drafter.config.mask_token_id
            block = torch.full((1, k + 1), mask_id, dtype=torch.long, device=last.device)
            block[0, 0] = last[0]
            logits = self.drafter.draft_logits(
                self.target, block, self.new_context, start, self.cache
            )
            position = start + self.new_context.shape[1]
            confidence, draft = logits[0].softmax(-1).max(-1)  # (k,), (k,)
            keep = confidence.topk((k + 1) // 2).indices
            block[0, 1 + keep] = draft[keep]  # the rest stays masked
            logits = self.drafter.draft_logits(
                self.target, block, self.new_context[:, :0], position, self.cache
            )
            out = logits[0].argmax(-1)
            out[keep] = draft[keep]
            return [ChainDraft(out)]

    return ConfidenceUnmaskingProposer
