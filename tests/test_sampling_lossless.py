"""Speculative sampling is lossless: the output distribution equals the target's.

Controlled setting: a toy Markov "target" over a 6-token vocabulary whose next-token
distribution is known exactly, and a different "draft" chain. One speculative step drafts 3
tokens (or a tree of the draft chain's likely paths) and commits 1..4; the first two committed
tokens are compared, over 36 outcomes and 20,000 runs, with the exact two-token distribution of
the target by a chi-square test. The lossless rules must pass (p > 0.01); the source article's
two rules must fail.

A tree with prompt lookup's branches added (``tree.add_branch``) passes it too.

End to end, the real loop with the shipped target and drafts that differ from it (DFlash's chain
and tree, a sampling draft model, prompt lookup, the hybrid tree) passes the same kind of test on
its first three sampled tokens, with rejections and acceptances both common.
"""
import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from dflash_lite.decoding.acceptance import (
    SamplingParams,
    accept_article_ratio,
    accept_article_threshold,
    accept_point_mass,
    accept_speculative,
    target_probs,
)
from dflash_lite.decoding.baselines import DraftModelProposer
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.decode import DFlashProposer, PerRow, generate
from dflash_lite.decoding.target import default_drafter_path
from dflash_lite.decoding.ngram import NgramProposer
from dflash_lite.decoding.tree import DFlashTreeProposer, DraftTree, HybridTreeProposer, accept_tree, add_branch
from sampling_checks import assert_samples_follow

V, K, RUNS = 6, 3, 20_000


def chain(seed: int, sharp: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(V, V, generator=g) * sharp            # logits of next token given previous


TARGET_LOGITS = chain(0, 2.5)
DRAFT_LOGITS = TARGET_LOGITS + chain(1, 1.5)    # a draft that mostly, not always, agrees


def two_token_frequencies(rule: str, sampling: SamplingParams, seed: int = 0) -> np.ndarray:
    """Counts of the first two committed tokens after token 0, over RUNS speculative steps."""
    g = torch.Generator().manual_seed(seed)
    p_table = target_probs(TARGET_LOGITS, sampling)           # (V, V): target's processed distribution
    q_table = target_probs(DRAFT_LOGITS, SamplingParams(temperature=1.0))
    counts = np.zeros((V, V))
    for _ in range(RUNS):
        prev, drafts, qs = 0, [], []
        for _ in range(K):                                    # draft K tokens from the draft chain
            q = q_table[prev]
            deterministic = rule in ("point_mass", "article_threshold")   # DFlash-style argmax drafts
            x = int(q.argmax()) if deterministic else int(torch.multinomial(q, 1, generator=g))
            drafts.append(x)
            qs.append(q)
            prev = x
        block = [0] + drafts                                  # the target scores every block position
        p = torch.stack([p_table[t] for t in block])          # (K+1, V)
        d, q = torch.tensor(drafts), torch.stack(qs)
        if rule == "point_mass":
            n, nxt = accept_point_mass(d, p, g)
        elif rule == "general":
            n, nxt = accept_speculative(d, q, p, g)
        elif rule == "article_ratio":
            n, nxt = accept_article_ratio(d, q, p, g)
        else:
            n, nxt = accept_article_threshold(d, p, 0.5, g)
        out = drafts[:n] + [nxt]
        if len(out) < 2:                                      # a second step: the target's own next token
            out.append(int(torch.multinomial(p_table[out[0]], 1, generator=g)))
        counts[out[0], out[1]] += 1
    return counts


def draft_tree() -> DraftTree:
    """The draft chain's likely paths after token 0, as a tree: its top 3 first tokens, the top 2
    after each of them, and the top 1 after the first of those (deterministic, like DFlash's)."""
    q = target_probs(DRAFT_LOGITS, SamplingParams(temperature=1.0))
    tokens, parents, depths = [0], [-1], [0]
    for a in q[0].topk(3).indices.tolist():
        tokens.append(a); parents.append(0); depths.append(1)
        node_a = len(tokens) - 1
        for rank, b in enumerate(q[a].topk(2).indices.tolist()):
            tokens.append(b); parents.append(node_a); depths.append(2)
            if rank == 0:
                tokens.append(int(q[b].argmax())); parents.append(len(tokens) - 2); depths.append(3)
    return DraftTree(torch.tensor(tokens), parents, depths)


def hybrid_tree() -> DraftTree:
    """:func:`draft_tree` with two branches added as prompt lookup's would be (``tree.add_branch``):
    one off the root through a first token the tree lacks, one that shares the tree's first node."""
    q = target_probs(DRAFT_LOGITS, SamplingParams(temperature=1.0))
    p = target_probs(TARGET_LOGITS, SamplingParams(temperature=1.0))
    fourth = int(q[0].topk(4).indices[-1])
    top, tree = int(q[0].argmax()), draft_tree()
    tree = add_branch(tree, [fourth, int(p[fourth].argmax()), 0])
    return add_branch(tree, [top, int(q[top].topk(3).indices[-1]), 1])


def tree_two_token_frequencies(sampling: SamplingParams, seed: int = 0, tree: DraftTree | None = None) -> np.ndarray:
    """The same counts with the tree rule (``tree.accept_tree``): the target scores every node."""
    g = torch.Generator().manual_seed(seed)
    tree = tree or draft_tree()
    added = len(draft_tree())                                      # nodes past this one came from branches
    logits = TARGET_LOGITS[tree.tokens]                           # (nodes, V): the target after each node
    p_table = target_probs(TARGET_LOGITS, sampling)
    counts, walked, branched = np.zeros((V, V)), 0, 0
    for _ in range(RUNS):
        path, nxt = accept_tree(tree, logits, sampling, generator=g)
        out = tree.tokens[path[1:]].tolist() + [nxt]
        walked += len(path) > 2
        branched += max(path) >= added
        if len(out) < 2:
            out.append(int(torch.multinomial(p_table[out[0]], 1, generator=g)))
        counts[out[0], out[1]] += 1
    assert walked > RUNS // 20, "the tree rule should often accept two drafts or more here"
    assert (branched > RUNS // 50) == (len(tree) > added), "added branches should be walked now and then"
    return counts


def exact_two_token(sampling: SamplingParams) -> np.ndarray:
    p = target_probs(TARGET_LOGITS, sampling).double().numpy()
    return p[0][:, None] * p                                  # P(a) P(b | a)


def p_value(rule: str, sampling: SamplingParams) -> float:
    if rule in ("tree", "hybrid_tree"):
        observed = tree_two_token_frequencies(sampling, tree=hybrid_tree() if rule == "hybrid_tree" else None).ravel()
    else:
        observed = two_token_frequencies(rule, sampling).ravel()
    expected = exact_two_token(sampling).ravel() * RUNS
    keep = expected > 0
    assert observed[~keep].sum() == 0, "a token outside the target's support was emitted"
    expected = expected[keep] * observed.sum() / expected[keep].sum()    # float rounding of p
    return chisquare(observed[keep], expected).pvalue


SETTINGS = {"t=1": SamplingParams(temperature=1.0), "t=0.7,top_p=0.8": SamplingParams(temperature=0.7, top_p=0.8),
            "top_k=4": SamplingParams(temperature=1.0, top_k=4)}


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("rule", ["point_mass", "general", "tree", "hybrid_tree"])
def test_lossless_rules_match_the_target_distribution(rule, setting):
    assert p_value(rule, SETTINGS[setting]) > 0.01


@pytest.mark.parametrize("rule", ["article_ratio", "article_threshold"])
def test_source_article_rules_change_the_distribution(rule):
    assert p_value(rule, SETTINGS["t=1"]) < 1e-6


RUNS_END_TO_END = 800


@pytest.fixture(scope="module")
def three_token_distribution(tiny):
    """``of(prompt)``: the prompt's ids, and the target's exact distribution of its first three
    sampled tokens (top_k=3)."""
    target, tokenizer = tiny
    known = {}

    def p_next(prefix):
        with torch.no_grad():
            return target_probs(target(prefix).logits[0, -1:], SamplingParams(temperature=1.0, top_k=3))[0]

    def of(prompt: str):
        if prompt not in known:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            exact, p1 = {}, p_next(ids)
            for a in p1.nonzero().flatten().tolist():
                ids_a = torch.cat([ids, torch.tensor([[a]])], 1)
                p2 = p_next(ids_a)
                for b in p2.nonzero().flatten().tolist():
                    p3 = p_next(torch.cat([ids_a, torch.tensor([[b]])], 1))
                    for c in p3.nonzero().flatten().tolist():
                        exact[(a, b, c)] = float(p1[a] * p2[b] * p3[c])
            known[prompt] = ids, exact
        return known[prompt]
    return of


@pytest.mark.slow
@pytest.mark.parametrize("draft", ["dflash", "dflash_tree", "noisy_sampled", "ngram",
                                   "hybrid_tree"])
def test_the_real_loop_samples_from_the_target(tiny, noisy_draft_model, three_token_distribution, draft, shapes):
    """End to end with the shipped target: three sampled tokens (top_k=3). The first comes from the
    prefill; the next two from one speculative step that drafts one token, so that token is
    accepted or rejected. None of the drafts is the target: the shipped DFlash drafter (a point
    mass, ``accept_point_mass``), the same drafter's two likeliest first tokens as a tree of two
    siblings (``tree.accept_tree``), a noisy copy of the target sampling at temperature 2 (the
    general rule, whose rejections sample the residual max(p - q, 0)), prompt lookup (a point mass
    copied from the prompt, which repeats itself so that the lookup finds a match for most first
    tokens), and that tree with prompt lookup's token added as a branch. Each must reject and
    accept often, and the tokens must follow the target's exact three-token distribution."""
    target, _ = tiny
    ids, exact = three_token_distribution("a = b + c\nd = b +" if draft in ("ngram", "hybrid_tree") else "The answer is")
    sampling = SamplingParams(temperature=1.0, top_k=3)
    if draft == "dflash":
        drafter = load_drafter(default_drafter_path("tiny"))
        make = lambda g: DFlashProposer(drafter, target, 2, shapes=shapes)
    elif draft == "dflash_tree":
        drafter = load_drafter(default_drafter_path("tiny"))
        make = lambda g: DFlashTreeProposer(drafter, target, 2, block_size=2, shapes=shapes)
    elif draft == "ngram":
        make = lambda g: PerRow(NgramProposer(max_drafts=1, shapes=shapes))
    elif draft == "hybrid_tree":
        drafter = load_drafter(default_drafter_path("tiny"))
        make = lambda g: HybridTreeProposer(drafter, target, 2, block_size=2, ngram_drafts=1, shapes=shapes)
    else:
        if shapes.fixed:
            pytest.skip("the small draft model is an eager proposer (its own transformers forward)")
        make = lambda g: PerRow(DraftModelProposer(noisy_draft_model, target, 2, SamplingParams(temperature=2.0),
                                                   sample=True, generator=g))
    g = torch.Generator().manual_seed(7)
    assert_samples_follow(exact, [generate(target, make(g), ids, 3, sampling, generator=g) for _ in range(RUNS_END_TO_END)])


@pytest.mark.slow
@pytest.mark.parametrize("tree_sizes,ngram", [((), 0), ((4,), 0), ((4,), 3)], ids=["chains", "with_trees", "hybrid"])
def test_the_cost_aware_policy_samples_from_the_target(tiny, tree_sizes, ngram, shapes):
    """The policy chooses each step's block size (or a tree) from the acceptance so far, so its
    choices depend on earlier samples. Four sampled tokens (temperature 3, top_k=2: the drafter is
    often but not always right) through it with the shipped drafter, against the target's exact
    four-token distribution; the sequence of choices must vary from run to run (plain decoding
    after a miss included), and with
    trees offered, trees must be chosen; with prompt lookup offered too (the hybrid policy), its
    chain or the hybrid tree must be chosen."""
    from dflash_lite import corpus
    from dflash_lite.decoding.checkpoints import load_drafter
    from dflash_lite.decoding.decode import generate
    from dflash_lite.decoding.costs import StepCosts
    from dflash_lite.decoding.policy import CostAwareProposer, PolicyOptions
    from dflash_lite.decoding.target import default_drafter_path

    target, tokenizer = tiny
    drafter = load_drafter(default_drafter_path("tiny"))
    sampling = SamplingParams(temperature=3.0, top_k=2)
    ids = tokenizer(corpus.math_problem(corpus.HELD_OUT_SEED + 7).prompt, return_tensors="pt").input_ids
    if ngram:                                                 # a prompt that repeats itself: the lookup finds matches
        ids = tokenizer("a = b + c\nd = b + c\na = b +", return_tensors="pt").input_ids
    exact = {(): 1.0}
    with torch.no_grad():
        for _ in range(4):                                    # P(t1..t4) by the chain rule, prefix by prefix
            grown = {}
            for prefix, p in exact.items():
                logits = target(torch.cat([ids, torch.tensor([list(prefix)], dtype=torch.long)], 1)).logits[0, -1:]
                probs = target_probs(logits, sampling)[0]
                for t in probs.nonzero().flatten().tolist():
                    grown[prefix + (t,)] = p * float(probs[t])
            exact = grown
    # drafting pays at the optimistic prior, not after a first-position miss (a drops to 0.4)
    costs = StepCosts({1: 1.0, 2: 1.2, 16: 1.4}, {2: 0.45, 16: 0.5})
    g = torch.Generator().manual_seed(11)
    runs, counts, sequences, all_choices = 600, dict.fromkeys(exact, 0), set(), set()
    for _ in range(runs):
        options = PolicyOptions(prior_weight=1.0, tree_sizes=tree_sizes, ngram_drafts=ngram)
        proposer = CostAwareProposer(drafter, target, options, costs, shapes=shapes)
        tokens = tuple(generate(target, proposer, ids, 4, sampling, generator=g).tokens)
        assert tokens in counts
        counts[tokens] += 1
        sequences.add(tuple(str(c) for c in proposer.chosen))
        all_choices.update(proposer.chosen)
    assert len(sequences) > 1                                 # the choices follow earlier samples
    assert ngram or any("1" in seq[1:] for seq in sequences)  # plain decoding after a miss
    assert any(c.tree_size for c in all_choices) == bool(tree_sizes)
    assert any(c.kind in ("ngram", "hybrid") for c in all_choices) == bool(ngram)
    keys = sorted(exact, key=exact.get)
    expected = np.array([exact[k] for k in keys]) * runs
    observed = np.array([counts[k] for k in keys], dtype=float)
    small = expected < 5                                      # pool rare outcomes into one cell
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    assert chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 0.01
