"""Self-checks for notebook 03, the block-diffusion drafter.

Every expected answer is computed here from the package and the models passed in, never typed in.
"""
from __future__ import annotations

import torch

from . import correct, not_attempted
from ..baselines import generate_autoregressive
from ..data import block_attention_mask
from ..decode import DFlashProposer, generate
from ..target import context_features


def _first_block(drafter, target, ids: torch.Tensor, block_size: int):
    """Target forward over ``ids``; returns (features, last token, block [last, MASK x (B-1)])."""
    with torch.inference_mode():
        out = target(ids, output_hidden_states=True)
    features = context_features(out.hidden_states, drafter.config.target_layer_ids)     # (1, C, K*H)
    last = out.logits[0, -1].argmax()
    block = torch.full((1, block_size), drafter.config.mask_token_id, device=ids.device)
    block[0, 0] = last
    return features, last, block


def check_visible_keys(answer) -> bool:
    """Exercise 1: keys one query of the last block may attend to (anchors [3, 6, 9], T = 12, B = 4)."""
    if answer is None:
        return not_attempted("Exercise 1", "Count the black cells in one row of the last block in the mask figure.")
    mask = block_attention_mask(torch.tensor([3, 6, 9]), 12, 4)
    expected = int(mask[-1].sum())
    assert int(answer) == expected, (
        f"{answer} is not it. A query of the last block (anchor 9) sees the context positions strictly "
        "before its anchor, plus every slot of its own block (both directions), and nothing else.")
    return correct("Exercise 1", f"{expected} keys: {int(mask[-1, :12].sum())} context positions + "
                                 f"{int(mask[-1, 12:].sum())} slots of its own block.")


def check_least_sure_position(answer, drafter, target, ids: torch.Tensor, block_size: int) -> bool:
    """Exercise 2: the block position (1..B-1) with the lowest top-1 probability."""
    if answer is None:
        return not_attempted("Exercise 2", "softmax the draft logits and look at the largest probability per position.")
    features, _, block = _first_block(drafter, target, ids, block_size)
    logits = drafter.draft_logits(target, block, features, 0)[0]                         # (B-1, V)
    top1 = logits.softmax(-1).max(-1).values                                             # (B-1,)
    expected = int(top1.argmin()) + 1                                                    # slot 0 is not drafted
    hint = f"answer with an int in 1..{block_size - 1}: the block position, counting the last accepted token as 0"
    assert not isinstance(answer, float) and int(torch.as_tensor(answer).numel()) == 1, hint
    answer = int(answer)
    assert 1 <= answer <= block_size - 1, hint
    assert answer != expected - 1, "off by one: position j is the j-th masked slot, and slot 0 holds the last token"
    assert answer == expected, (
        f"position {answer} has top-1 probability {top1[answer - 1]:.3f}, but another position is lower. "
        "Use the probabilities (softmax over the vocabulary), not the raw logits.")
    return correct("Exercise 2", f"position {expected}, top-1 probability {top1[expected - 1]:.3f}.")


def check_second_pass(answer, drafter, target, ids: torch.Tensor, block_size: int) -> bool:
    """Exercise 3: the draft after re-feeding the first-pass draft into the block."""
    if answer is None:
        return not_attempted("Exercise 3", "put the first-pass argmax into slots 1..B-1 and run the drafter again.")
    features, last, _ = _first_block(drafter, target, ids, block_size)
    drafts = {}
    for passes in (1, 2):
        proposer = DFlashProposer(drafter, target, block_size, passes=passes)
        proposer.start(ids, features)
        drafts[passes] = proposer.propose(last, block_size - 1)[0].cpu()
    answer = torch.as_tensor(answer).cpu()
    assert answer.shape == drafts[2].shape, \
        f"expected shape {tuple(drafts[2].shape)} (B-1 token ids), got {tuple(answer.shape)}"
    if torch.equal(drafts[1], drafts[2]):
        print("(For this prompt the second pass happens to give the same draft as the first.)")
    else:
        assert not torch.equal(answer, drafts[1]), "that is the first-pass draft: run the drafter a second time"
    assert torch.equal(answer, drafts[2]), (
        f"{int((answer != drafts[2]).sum())} of {block_size - 1} tokens differ from DFlashProposer(passes=2). "
        "Slot 0 keeps the last token, slots 1..B-1 hold the first-pass draft, positions are unchanged.")
    changed = int((drafts[1] != drafts[2]).sum())
    return correct("Exercise 3", f"the second pass changed {changed} of {block_size - 1} draft tokens.")


def measured_tau(proposer_factory, target, prompt_ids, max_new_tokens: int, stops) -> float:
    """Mean acceptance length over all steps of all prompts (greedy)."""
    lengths = [a for x in prompt_ids for a in generate(
        target, proposer_factory(), x, max_new_tokens, stop_token_ids=stops).acceptance_lengths]
    return sum(lengths) / len(lengths)


def check_tau_at_block_size(answer, drafter, target, prompt_ids, block_size: int, max_new_tokens: int,
                            stops) -> bool:
    """Exercise 4: tau of the drafter run at a block size it was not trained with."""
    if answer is None:
        return not_attempted("Exercise 4", "DFlashProposer(drafter, target, 8) in generate, "
                                           "then the mean of all acceptance lengths.")
    expected = measured_tau(lambda: DFlashProposer(drafter, target, block_size), target, prompt_ids,
                            max_new_tokens, stops)
    trained = measured_tau(lambda: DFlashProposer(drafter, target), target, prompt_ids, max_new_tokens, stops)
    if abs(float(answer) - trained) < 1e-6 and abs(trained - expected) > 1e-6:
        raise AssertionError(f"that is tau at the trained block size {drafter.config.block_size}; "
                             f"pass block_size={block_size} to DFlashProposer")
    assert abs(float(answer) - expected) < 1e-6, (
        f"{float(answer):.3f} is not what this repository measures. Pool the acceptance lengths of every "
        "step of every prompt, then take one mean (not a mean of per-prompt means).")
    return correct("Exercise 4", f"tau {expected:.2f} at B={block_size} against {trained:.2f} at the trained "
                                 f"B={drafter.config.block_size}.")


def check_unmasking_proposer(answer, drafter, target, prompt_ids, block_size: int, max_new_tokens: int,
                             stops) -> bool:
    """Exercise 5: a proposer class that unmasks the confident half first (MDLM-style, two steps)."""
    if answer is None:
        return not_attempted("Exercise 5", "subclass DFlashProposer and override propose(last_token, k).")
    assert isinstance(answer, type) and issubclass(answer, DFlashProposer), \
        "answer with the class itself, a subclass of DFlashProposer"
    features, last, _ = _first_block(drafter, target, prompt_ids[0], block_size)
    proposer = answer(drafter, target, block_size)
    proposer.start(prompt_ids[0], features)
    first = torch.as_tensor(proposer.propose(last, block_size - 1)[0]).cpu()
    assert first.shape == (block_size - 1,), f"propose must return B-1 = {block_size - 1} token ids first"
    taus = {}
    for name, cls in (("one pass", DFlashProposer), ("unmasking", answer)):
        lengths, tokens, seconds = [], 0, 0.0
        for x in prompt_ids:
            r = generate(target, cls(drafter, target, block_size), x, max_new_tokens, stop_token_ids=stops)
            if cls is answer:
                assert r.tokens == generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops).tokens
            lengths += r.acceptance_lengths
            tokens, seconds = tokens + len(r.tokens), seconds + r.total_time
        taus[name] = (sum(lengths) / len(lengths), tokens / seconds)
    shown = "; ".join(f"{n}: tau {t:.2f}, {s:.0f} tokens/s" for n, (t, s) in taus.items())
    return correct("Exercise 5", shown)
