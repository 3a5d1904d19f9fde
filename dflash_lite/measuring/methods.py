"""The benchmark's methods (:mod:`dflash_lite.measuring.benchmark`): what each row runs
(:func:`standard_methods`), each a :class:`~dflash_lite.measuring.report.Method` whose run is the
one decode loop with a fresh proposer (or a policy session's), or transformers' ``generate``."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..decoding.acceptance import SamplingParams
from ..decoding.baselines import (AdaptiveDFlashProposer, DraftModelProposer, EagleProposer,
                                  NoDraftProposer, hf_generate)
from ..decoding.checkpoints import to_transformers
from ..decoding.decode import DFlashProposer, PerRow, generate
from ..decoding.ngram import NgramProposer
from ..decoding.session import DEFAULT_OPTIONS, NO_NGRAM_OPTIONS, PolicySession
from ..decoding.shapes import EAGER, FixedShapes, Shapes
from ..decoding.target import stop_token_ids
from ..decoding.tree import DFlashTreeProposer, HybridTreeProposer
from .report import Kind, Method


@dataclass
class Rows:
    """Which rows :func:`standard_methods` builds, and how every run samples. ``prompt_lookup``:
    drafts per step of the prompt-lookup rows, ``adaptive``: the adaptive rule's sizes (None: no
    such rows); ``draft_block_size``: the small draft model's."""
    block_sizes: tuple[int, ...] = (16,)
    tree_sizes: tuple[int, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    hf_dflash: bool = True
    draft_block_size: int = 5
    prompt_lookup: int | None = 10
    adaptive: tuple[int, ...] | None = None


def standard_methods(target, tokenizer, drafter=None, eagle=None, draft_model=None,
                     rows: Rows | None = None, **options) -> list[Method]:
    """The rows, in order: the baselines (our loop, ``model.generate``), the peers (a small draft
    model, ours and transformers'; prompt lookup, transformers' and ours; the EAGLE-style drafter),
    then DFlash (:func:`_dflash_methods`) and transformers' DFlash path with the same weights.
    ``rows`` (or its fields as keywords): which rows, see :class:`Rows`."""
    r = rows or Rows(**options)
    sampling = r.sampling
    stops = stop_token_ids(target, tokenizer)

    def hf(**kwargs):
        return lambda ids, n: hf_generate(target, tokenizer, ids, n, stops, sampling, **kwargs)

    methods = [Method("autoregressive (ours)", _spec_run(target, NoDraftProposer, sampling, stops),
                      Kind.AUTOREGRESSIVE, block_size=1),
               Method("model.generate", hf(), Kind.HF_GENERATE, block_size=1)]
    if draft_model is not None:
        methods.append(Method(f"draft model (ours) k={r.draft_block_size - 1}", _spec_run(
            target, lambda: PerRow(DraftModelProposer(draft_model, target, r.draft_block_size)),
            sampling, stops), Kind.DRAFT_MODEL, block_size=r.draft_block_size))
        methods.append(Method("draft model (transformers)", hf(assistant_model=draft_model),
                              Kind.HF_DRAFT_MODEL))
    if r.prompt_lookup:
        methods.append(Method(f"prompt lookup (transformers) k={r.prompt_lookup}",
                              hf(prompt_lookup_num_tokens=r.prompt_lookup), Kind.PROMPT_LOOKUP))
        methods.append(Method(f"prompt lookup (ours) k={r.prompt_lookup}", _spec_run(
            target, lambda: PerRow(NgramProposer(r.prompt_lookup)), sampling, stops), Kind.NGRAM))
    if eagle is not None:
        methods.append(Method(f"EAGLE-style (ours) B={eagle.config.block_size}", _spec_run(
            target, lambda: PerRow(EagleProposer(eagle, target)), sampling, stops), Kind.EAGLE,
            block_size=eagle.config.block_size))
    if drafter is not None:
        methods += _dflash_methods(target, drafter, r.block_sizes, r.tree_sizes, r.adaptive,
                                   (sampling, stops))
        if r.hf_dflash:
            converted = to_transformers(drafter, dtype=next(target.parameters()).dtype).to(
                target.device)
            methods.append(Method(f"DFlash (transformers) B={drafter.config.block_size}",
                                  hf(assistant_model=converted, speculation_type="dflash"),
                                  Kind.HF_DFLASH, block_size=drafter.config.block_size))
    return methods


def _dflash_methods(target, drafter, block_sizes, tree_sizes, adaptive, loop,
                    shapes: Shapes = EAGER) -> list[Method]:
    """Our DFlash rows: the two policies (the default first; on fixed shapes the default only),
    fixed block sizes, the adaptive rule, draft trees and hybrid trees; ``loop``: (sampling, stop
    tokens) of every run; ``shapes``: every proposer's (:mod:`dflash_lite.decoding.shapes`)."""
    def ours(make):
        return _spec_run(target, make, *loop)

    rows = []
    policies = (("DFlash (ours) cost-aware", DEFAULT_OPTIONS, True),
                ("DFlash (ours) cost-aware, no n-gram", NO_NGRAM_OPTIONS, False))
    for name, options, default in policies[: 1 if shapes.fixed else 2]:
        session = PolicySession(drafter, target, options, recalibrate=False)
        rows.append(Method(name, _policy_run(target, session, *loop, shapes), Kind.DFLASH_POLICY,
                           default=default and not shapes.fixed, session=session))
    rows += [Method(f"DFlash (ours) B={b}", ours(lambda b=b: DFlashProposer(
        drafter, target, b, shapes=shapes)), Kind.DFLASH, block_size=b) for b in block_sizes]
    if adaptive:
        sizes = "/".join(map(str, sorted(adaptive)))
        rows.append(Method(f"DFlash (ours) adaptive B in {sizes}", ours(
            lambda: AdaptiveDFlashProposer(drafter, target, adaptive)), Kind.DFLASH_ADAPTIVE))
    for name, kind, tree in (("DFlash tree N={}", Kind.DFLASH_TREE, DFlashTreeProposer),
                             ("DFlash hybrid tree N={} + n-gram", Kind.DFLASH_HYBRID,
                              HybridTreeProposer)):
        rows += [Method(name.format(n), ours(lambda n=n, tree=tree: tree(
            drafter, target, n, shapes=shapes)), kind, tree_size=n) for n in tree_sizes]
    return rows


def compiled_methods(target, drafter, block_sizes, tree_sizes, length: int,
                     sampling: SamplingParams, stops) -> list[Method]:
    """``bench --compile`` (docs/method.md#fixed-shapes-and-compilation): plain decoding, prompt
    lookup and, with a drafter, :func:`_dflash_methods`, on one compiled ``FixedShapes`` of
    ``length`` tokens (recorded in the untimed warm-up), each row marked ``compiled``."""
    buckets = {1, 2, 4, 8, 16, 32, 64, *block_sizes, *(n + 1 for n in tree_sizes)}
    shapes = FixedShapes(length, compile=True, buckets=buckets)
    rows = [Method("autoregressive (ours)", _spec_run(target, lambda: NoDraftProposer(shapes),
                   sampling, stops), Kind.AUTOREGRESSIVE, block_size=1),
            Method("prompt lookup (ours) k=10", _spec_run(target, lambda: PerRow(NgramProposer(
                10, shapes=shapes)), sampling, stops), Kind.NGRAM)]
    if drafter is not None:
        rows += _dflash_methods(target, drafter, block_sizes, tree_sizes, None, (sampling, stops),
                                shapes)
    how = "CUDA graphs" if target.device.type == "cuda" else "compiled"
    for row in rows:
        row.name = f"{row.name} ({how})"
        row.compiled = True
    return rows


def _spec_run(target, make_proposer, sampling, stops):
    """A method's run: the decode loop with a fresh proposer (block size 1: autoregressive)."""
    def run(ids, n):
        result = generate(target, make_proposer(), ids, n, sampling, stops)
        return result.tokens, result
    return run


def _policy_run(target, session: PolicySession, sampling, stops, shapes: Shapes = EAGER):
    """A policy row's run, as one user's session: the step costs measured at its first run (at the
    first prompt, in the untimed warm-up) and the acceptance estimates each run leaves, both kept
    in ``session`` for the next run, as an ``Engine`` keeps them."""
    def run(ids, n):
        proposer = session.proposer(ids, shapes)
        result = generate(target, proposer, ids, n, sampling, stops)
        session.finished(proposer)
        return result.tokens, result
    return run
