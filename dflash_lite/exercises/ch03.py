"""Self-checks for notebook 03, the block-diffusion drafter."""
from __future__ import annotations

import statistics

import torch

from .. import corpus
from ..decoding.baselines import generate_autoregressive
from ..decoding.decode import ChainDraft, DFlashProposer, generate
from ..decoding.drafter import apply_rope
from ..decoding.target import context_features
from ..training.data import block_attention_mask
from . import attempt, correct, not_attempted


def _first_block(drafter, target, ids: torch.Tensor, block_size: int):
    """Target forward over ``ids``; returns (features, last token, block [last, MASK x (B-1)])."""
    with torch.inference_mode():
        out = target(ids, output_hidden_states=True)
    features = context_features(out.hidden_states, drafter.config.target_layer_ids)  # (1, C, K*H)
    last = out.logits[0, -1].argmax()
    block = torch.full((1, block_size), drafter.config.mask_token_id, device=ids.device)
    block[0, 0] = last
    return features, last, block


def package_draft_logits(drafter, target):
    """The package's drafter forward in the shape of the notebook's ``my_draft_logits(block_ids,
    features, block_pos, ctx_pos, mask=None)``: (1, Q) block tokens -> (1, Q, V) logits of every
    slot, for the demonstrations while ``my_draft_logits`` is not done."""

    def draft_logits(block_ids, features, block_pos, ctx_pos, mask=None):
        device = block_ids.device
        embeds = target.get_input_embeddings()(block_ids)                         # (1, Q, H)
        masks = None if mask is None else mask[None, None].to(device)             # (1, 1, Q, C+Q)
        hidden = drafter(embeds, features, block_pos[None].to(device),
                         ctx_pos[None].to(device), None, masks)                   # (1, Q, H)
        return target.get_output_embeddings()(hidden)                             # (1, Q, V)

    return draft_logits


def check_rope(rope_cos_sin, rotate, drafter) -> bool:
    """Build it: ``rope_cos_sin(positions)`` and ``rotate(x, cos, sin)`` against the drafter's
    rotary embedding and ``drafter.apply_rope``, on several position ranges and random inputs."""
    c = drafter.config
    g = torch.Generator().manual_seed(0)
    device = next(drafter.parameters()).device
    for start, length in ((0, 5), (37, 16), (500, 3)):
        positions = torch.arange(start, start + length)
        cos, sin = rope_cos_sin(positions)
        probe = torch.zeros(1, length, c.hidden_size, device=device)
        ref_cos, ref_sin = drafter.rotary_emb(probe, positions[None].to(device))  # (1, T, D)
        span = f"positions {start}..{start + length - 1}"
        torch.testing.assert_close(cos, ref_cos[0], msg=f"cos differs at {span}")
        torch.testing.assert_close(sin, ref_sin[0], msg=f"sin differs at {span}")
        x = torch.randn(1, c.num_attention_heads, length, c.head_dim, generator=g).to(device)
        torch.testing.assert_close(rotate(x, cos, sin), apply_rope(x, ref_cos, ref_sin), msg=(
            "rotate(x, cos, sin) is not the rotation the drafter applies"))
    return correct("Build it", "RoPE as the drafter computes it.")


def check_block_mask(my_block_mask) -> bool:
    """Build it: ``my_block_mask(anchors, T, B)`` against the package's training mask, on several
    anchors, context lengths and block sizes."""
    for anchors, T, B in (([3, 6, 9], 12, 4), ([0], 5, 3), ([2, 7], 10, 2), ([1, 4, 5, 11], 16, 5)):
        anchors = torch.tensor(anchors)
        expected = block_attention_mask(anchors, T, B)
        got = torch.as_tensor(my_block_mask(anchors, T, B))
        where = f"anchors {anchors.tolist()}, T={T}, B={B}"
        assert got.shape == expected.shape, f"{where}: shape {tuple(got.shape)}"
        assert torch.equal(got.bool(), expected), \
            f"{where}: {int((got.bool() != expected).sum())} differ"
    return correct("Build it", "the training mask on four layouts.")


@attempt("Exercise 1", "Count the black cells in one row of the last block in the mask figure.")
def check_visible_keys(answer) -> bool:
    """Exercise 1: keys one query of the last block may attend to (anchors [3, 6, 9], T=12, B=4)."""
    mask = block_attention_mask(torch.tensor([3, 6, 9]), 12, 4)
    expected = int(mask[-1].sum())
    assert int(answer) == expected, (
        f"{answer} is not it. A query of the last block (anchor 9) sees the context positions "
        "strictly before its anchor, plus every slot of its own block (both directions), and "
        "nothing else.")
    return correct("Exercise 1", f"{expected} keys: {int(mask[-1, :12].sum())} context positions + "
                                 f"{int(mask[-1, 12:].sum())} slots of its own block.")


def exercise_prompts(tokenizer) -> list[torch.Tensor]:
    """Exercise 2's prompts: section 1's, more held-out problems and a code header. On some of
    them ranking by raw logits and by probabilities disagree."""
    texts = [corpus.math_problem(corpus.HELD_OUT_SEED + n).prompt for n in (123, 124, 128)]
    texts += corpus.function_headers(corpus.stdlib_files("held_out"), 1, seed=31)
    return [tokenizer(t, return_tensors="pt").input_ids for t in texts]


def check_least_sure_position(least_sure_position, drafter, target, tokenizer,
                              block_size: int) -> bool:
    """Exercise 2: ``least_sure_position(ids)``, the block position (1..B-1) whose top-1
    probability is lowest, on several prompts (near-ties left out)."""
    prompts = exercise_prompts(tokenizer)
    if least_sure_position is None or least_sure_position(prompts[0].to(target.device)) is None:
        return not_attempted("Exercise 2", "Write least_sure_position(ids) returning an int.")
    checked = 0
    for ids in prompts:
        ids = ids.to(target.device)
        features, _, block = _first_block(drafter, target, ids, block_size)
        with torch.inference_mode():
            logits = drafter.draft_logits(target, block, features, 0)[0]  # (B-1, V)
        top1 = logits.softmax(-1).max(-1).values  # (B-1,)
        lowest = top1.sort().values
        if float(lowest[1] - lowest[0]) < 1e-3:
            continue  # a near-tie
        expected = int(top1.argmin()) + 1  # slot 0 is not drafted
        answer = least_sure_position(ids)
        hint = f"return an int in 1..{block_size - 1}: the block position (the last token is 0)"
        assert not isinstance(answer, float) and int(torch.as_tensor(answer).numel()) == 1, hint
        answer = int(answer)
        assert 1 <= answer <= block_size - 1, hint
        assert answer != expected - 1, \
            "off by one: position j is the j-th masked slot; slot 0 holds the last token"
        assert answer == expected, (f"on held-out prompt {checked}, position {answer} is not the "
                                    "one with the lowest top-1 probability")
        checked += 1
    assert checked >= 3, "internal: too few prompts without a near-tie"
    return correct("Exercise 2", f"the least sure position, on {checked} prompts.")


@attempt("Exercise 3", "Give the second-pass draft: a LongTensor, B-1 ids.")
def check_second_pass(answer, drafter, target, ids: torch.Tensor, block_size: int) -> bool:
    """Exercise 3: the draft after re-feeding the first-pass draft into the block."""
    features, last, _ = _first_block(drafter, target, ids, block_size)
    drafts = {}
    for passes in (1, 2):
        proposer = DFlashProposer(drafter, target, block_size, passes=passes)
        proposer.start(ids, features)
        drafts[passes] = proposer.propose(last.view(1), [block_size - 1])[0].tokens.cpu()
    answer = torch.as_tensor(answer).cpu()
    assert answer.shape == drafts[2].shape, \
        f"expected shape {tuple(drafts[2].shape)} (B-1 token ids), got {tuple(answer.shape)}"
    if torch.equal(drafts[1], drafts[2]):
        print("(For this prompt the second pass happens to give the same draft as the first.)")
    else:
        assert not torch.equal(answer, drafts[1]), \
            "that is the first-pass draft: run the drafter a second time"
    assert torch.equal(answer, drafts[2]), (
        f"{int((answer != drafts[2]).sum())} of {block_size - 1} tokens differ from "
        "DFlashProposer(passes=2). Slot 0 keeps the last token, slots 1..B-1 hold the first-pass "
        "draft, positions are unchanged.")
    changed = int((drafts[1] != drafts[2]).sum())
    return correct("Exercise 3",
                   f"the second pass changed {changed} of {block_size - 1} draft tokens.")


def step_lengths(drafter, target, prompt_ids, block_size, max_new_tokens: int, stops) -> list:
    """The steps' acceptance lengths, one list per prompt (greedy; ``block_size=None``: trained)."""
    return [generate(target, DFlashProposer(drafter, target, block_size), x, max_new_tokens,
                     stop_token_ids=stops).acceptance_lengths for x in prompt_ids]


@attempt("Exercise 4", "Give tau as a float.")
def check_tau_at_block_size(answer, drafter, target, prompt_ids, block_size: int,
                            max_new_tokens: int, stops) -> bool:
    """Exercise 4: tau of the drafter run at a block size it was not trained with."""
    per_prompt = step_lengths(drafter, target, prompt_ids, block_size, max_new_tokens, stops)
    at_trained = step_lengths(drafter, target, prompt_ids, None, max_new_tokens, stops)
    expected, trained = (statistics.mean(a for lengths in runs for a in lengths)
                         for runs in (per_prompt, at_trained))
    mean_of_means = statistics.mean(statistics.mean(lengths) for lengths in per_prompt)
    if abs(trained - expected) > 1e-6:
        assert abs(float(answer) - trained) > 1e-6, \
            f"that is tau at the trained block size {drafter.config.block_size}, not the one asked"
    if abs(mean_of_means - expected) > 1e-6:
        assert abs(float(answer) - mean_of_means) > 1e-6, \
            "that is a mean of per-prompt means: pool the steps of every prompt, then take one mean"
    else:
        print("(On these prompts the per-prompt means happen to give the same value.)")
    assert abs(float(answer) - expected) < 1e-6, \
        f"{float(answer):.3f} is not what this repository measures"
    return correct("Exercise 4", f"tau {expected:.2f} at B={block_size} against {trained:.2f} at "
                                 f"the trained B={drafter.config.block_size}.")


@attempt("Exercise 5", "subclass DFlashProposer and override propose(last, depths).")
def check_unmasking_proposer(answer, drafter, target, prompt_ids, block_size: int,
                             max_new_tokens: int, stops) -> bool:
    """Exercise 5: a proposer class that unmasks the confident half first (MDLM-style, 2 steps)."""
    assert isinstance(answer, type) and issubclass(answer, DFlashProposer), \
        "answer with the class itself, a subclass of DFlashProposer"
    features, last, _ = _first_block(drafter, target, prompt_ids[0], block_size)
    proposer = answer(drafter, target, block_size)
    proposer.start(prompt_ids[0], features)
    drafts = proposer.propose(last.view(1), [block_size - 1])
    assert isinstance(drafts, list) and len(drafts) == 1 and isinstance(drafts[0], ChainDraft), \
        "propose returns a list of drafts, one ChainDraft per row (one row here)"
    assert drafts[0].tokens.shape == (block_size - 1,), \
        f"propose must draft B-1 = {block_size - 1} token ids first"
    taus = {}
    for name, cls in (("one pass", DFlashProposer), ("unmasking", answer)):
        lengths, tokens, seconds = [], 0, 0.0
        for x in prompt_ids:
            r = generate(target, cls(drafter, target, block_size), x, max_new_tokens,
                         stop_token_ids=stops)
            if cls is answer:
                assert r.tokens == generate_autoregressive(target, x, max_new_tokens,
                                                           stop_token_ids=stops).tokens
            lengths += r.acceptance_lengths
            tokens += len(r.tokens)
            seconds += r.total_time
        taus[name] = (sum(lengths) / len(lengths), tokens / seconds)
    shown = "; ".join(f"{n}: tau {t:.2f}, {s:.0f} tokens/s" for n, (t, s) in taus.items())
    return correct("Exercise 5", shown)
