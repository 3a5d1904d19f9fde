"""The decode loop with static shapes, for CUDA graphs (docs/method.md#the-decode-loop; paper section 3).

:func:`dflash_lite.decode.steps` is the loop written for reading: caches that grow and are cropped,
blocks as wide as the drafts left, a host round trip for every decision. On a GPU each of those
costs a kernel launch or a synchronisation, and a small model's forward is far shorter than the
Python and launch time around it. This module runs the same algorithm the way gpt-fast does, so
that every forward can be captured once as a CUDA graph (``torch.compile(mode="reduce-overhead")``)
and replayed:

* **Sized once.** The target runs on a transformers ``StaticCache`` and the drafter on a
  :class:`StaticDrafterCache`, both allocated for the longest request at the start. Nothing is
  cropped: a step rewinds the write position to the first unaccepted slot, the next forward
  overwrites what was rejected, and the attention masks (built from the cache positions) hide
  every slot past the accepted ones in the meantime.
* **Fixed widths.** The target is only ever called on 1 token (plain decoding, or a last token)
  or a block of B (a draft tree: N + 1 rows); the drafter on a context of B (N + 1) positions and
  a block of B. A short final block is padded to B and the extra rows are ignored.
* **Draft trees** (``tree_size``, :mod:`dflash_lite.static_tree`): the drafter's logits give a tree
  of N drafts (:func:`dflash_lite.tree.build_tree`), verified at width N + 1 under a tree mask and
  accepted by :func:`dflash_lite.tree.accept_tree`; the accepted path's K/V move to consecutive
  slots in place. Building the tree reads the drafter's top tokens on the host: a second sync.
* **A policy** (``policy``, :mod:`dflash_lite.static_policy`): each step plain decoding, the chain
  or the tree, chosen where the drafter forward would run (the end of the step before), as the
  cost-aware policy rates them; after plain steps the drafter takes the context it missed.
* **One host sync per step.** Greedy acceptance runs on the device; the step's only read back is
  one small tensor holding the accepted count and the tokens, which the caller needs anyway.
  (At temperature > 0 the acceptance rules of :mod:`dflash_lite.acceptance` are used as they are.)

With ``compile_forwards`` (the default on CUDA) the fixed-width forwards go through
``torch.compile``, in ``reduce-overhead`` mode (CUDA graphs) on CUDA; each width is warmed up once.
On a CPU the same path runs eagerly, so the tests check it for losslessness there. Without a graph
to record, fixed shapes buy nothing, so an eager decoder by default attends to the filled slots
only (``prefix_only``): the same buffers and writes, without the work on empty slots and, for one
token, without a mask. The result is the same :class:`~dflash_lite.decode.GenerationResult` as
:func:`dflash_lite.decode.generate`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import torch
from transformers.cache_utils import Cache, StaticCache, StaticLayer

from .acceptance import SamplingParams, accept_point_mass, choose_tokens, target_probs
from .costs import step_costs
from .decode import GenerationResult, Step, check_request, cut_at_stop
from .drafter import DFlashDrafter, check_compatible
from .policy import NO_NGRAM_OPTIONS, Choice
from .report import Kind, Method
from .static_policy import StaticPolicy
from .static_tree import draft_static_tree, keep_path, tree_mask
from .target import context_features
from .tree import accept_tree
from .timing import PhaseTimer, no_phase
from .validate import check_int


class PrefixStaticLayer(StaticLayer):
    """A transformers ``StaticLayer`` whose attention can be limited to its first ``visible`` slots.

    ``visible`` None: the whole buffer, with a mask from the cache positions (what a CUDA graph
    needs). An int: the filled slots only, as a growing cache would give them, so a forward does no
    work on empty or stale slots and one token needs no mask at all."""
    visible: int | None = None

    @property
    def is_compileable(self) -> bool:       # transformers keeps a 1-token forward's mask only when True
        return self.visible is None

    def update(self, key_states, value_states, *args, **kwargs):
        if self.visible is None:
            return super().update(key_states, value_states, *args, **kwargs)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.visible - key_states.shape[-2]          # the new slots end where the visible ones do
        self.keys[:, :, start: self.visible] = key_states    # (the decoder sets the write position per forward)
        self.values[:, :, start: self.visible] = value_states
        return self.keys[:, :, : self.visible], self.values[:, :, : self.visible]   # (1, kv, visible, D)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return (self.max_cache_len if self.visible is None else self.visible), 0


class _Rule(NamedTuple):
    """How one request accepts and stops: its sampling, logits processors, generator and stop tokens."""
    sampling: SamplingParams
    processors: object
    generator: torch.Generator | None
    stops: set[int]


class StaticDrafterCache:
    """The drafter's context K/V in preallocated (1, kv, L, D) buffers, one pair per layer.

    A forward writes its new context at given positions (:meth:`writer`) and attends over the whole
    buffer; which slots hold accepted context is the mask's business (:func:`drafter_mask`), not the
    cache's, so the shapes never change. With ``visible`` set, it attends to that many slots only."""

    def __init__(self, config, length: int, dtype: torch.dtype, device: torch.device):
        shape = (1, config.num_key_value_heads, length, config.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.length = length
        self.visible: int | None = None

    def writer(self, positions: torch.Tensor) -> "_CacheWriter":
        """What a drafter layer calls ``append`` on: it writes its new context at ``positions`` (C,)."""
        return _CacheWriter(self, positions)


class _CacheWriter:
    def __init__(self, cache: StaticDrafterCache, positions: torch.Tensor):
        self.cache, self.positions = cache, positions

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write (1, kv, C, D) at the positions, in place; return the whole buffers (1, kv, L, D),
        or their first ``visible`` slots."""
        keys, values = self.cache.keys[layer], self.cache.values[layer]
        keys.index_copy_(2, self.positions, k)
        values.index_copy_(2, self.positions, v)
        visible = self.cache.visible
        return (keys, values) if visible is None else (keys[:, :, :visible], values[:, :, :visible])


def drafter_mask(cache_length: int, block_width: int, context_end: torch.Tensor) -> torch.Tensor:
    """(1, 1, 1, L + B) boolean: cache slots before ``context_end`` (the accepted context) and the
    whole block (bidirectional inside it) may be attended to; stale or padded slots may not."""
    slots = torch.arange(cache_length, device=context_end.device)
    allowed = torch.cat([slots < context_end, torch.ones(block_width, dtype=torch.bool, device=slots.device)])
    return allowed[None, None, None]


class StaticDecoder:
    """Plain decoding (``drafter=None``), DFlash chains of ``block_size``, or (``tree_size``) draft
    trees of N nodes at depth ``block_size - 1`` on static shapes; with a ``policy``
    (:class:`~dflash_lite.static_policy.StaticPolicy`), each step whichever of plain decoding, the
    chain and the tree it rates best.

    Owns the caches and the (compiled) forwards, so build it once and call :meth:`generate` or
    :meth:`steps` many times. ``max_length``: the longest prompt + new tokens it will serve (default:
    the target's context; size it tightly, every slot costs memory and, when compiled, attention).
    ``prefix_only``: attend to the filled slots only (default: when the forwards are not compiled;
    see the module's docstring); False keeps every shape fixed, as a compiled decoder runs."""

    def __init__(self, target, drafter: DFlashDrafter | None = None, block_size: int | None = None,
                 max_length: int | None = None, compile_forwards: bool | None = None,
                 prefix_only: bool | None = None, tree_size: int | None = None, policy: StaticPolicy | None = None):
        self.target, self.drafter, self.device, self.policy = target, drafter, target.device, policy
        if tree_size is not None and drafter is None:
            raise ValueError("tree_size needs a drafter: a draft tree is built from the drafter's logits")
        if policy is not None and drafter is None:
            raise ValueError("a policy needs a drafter: it chooses between plain decoding and drafting")
        if drafter is not None:
            check_compatible(drafter.config, target.config)
            if type(drafter) is not DFlashDrafter or "sliding_attention" in drafter.config.layer_types:
                raise ValueError("the static path runs the paper's drafter only (block drafting, KV injection, "
                                 "full attention); use dflash_lite.decode.generate for the others")
            block_size = drafter.config.block_size if block_size is None else block_size
            check_int("block_size", block_size, 2, drafter.config.max_block_size)
        self.block_size = 1 if drafter is None else block_size
        self.tree_size = None if tree_size is None else check_int("tree_size", tree_size)
        self.choice = Choice(self.block_size, self.tree_size)              # what every step drafts
        self.tree_width = None if tree_size is None else tree_size + 1      # a tree's verify: the root and N nodes
        self.context_width = max(self.block_size, self.tree_width or 1)  # drafter context per forward (fixed shapes)
        self.layer_ids = None if drafter is None else drafter.config.target_layer_ids
        self.max_length = check_int("max_length", max_length or target.config.max_position_embeddings)
        slots = self.slots = self.max_length + self.context_width           # room for a padded last block or tree
        compile_forwards = self.device.type == "cuda" if compile_forwards is None else compile_forwards
        self.prefix_only = not compile_forwards if prefix_only is None else prefix_only
        if self.prefix_only and compile_forwards:
            raise ValueError("prefix_only changes shapes every step; it cannot go with compiled forwards")
        self.cache = self._target_cache(slots)
        if drafter is not None:
            dtype = drafter.fc.weight.dtype
            self.draft_cache = StaticDrafterCache(drafter.config, slots, dtype, self.device)
            with torch.no_grad():                                           # RoPE angles of every slot, once
                cos, sin = drafter.rotary_emb(torch.empty(0, device=self.device), torch.arange(slots, device=self.device)[None])
            self.rope_table = (cos[0].to(dtype), sin[0].to(dtype))          # (L, D) each
            self.mask_token_id = drafter.config.mask_token_id
        self.compiled = compile_forwards
        mode = "reduce-overhead" if self.device.type == "cuda" else None  # CUDA graphs exist on CUDA only
        wrap = (lambda fn: torch.compile(fn, mode=mode)) if compile_forwards else (lambda fn: fn)
        self.target_forward, self.draft_forward = wrap(self._target_forward), wrap(self._draft_forward)
        self.warm = False
        self.offsets = torch.arange(slots, device=self.device)             # positions p + i come from here

    def _target_cache(self, slots: int):
        """The target's static cache: transformers' own, or layers that can attend to a prefix."""
        config = self.target.config
        if not self.prefix_only:
            return StaticCache(config=config, max_cache_len=slots)
        if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
            raise ValueError("prefix_only needs a target with full attention in every layer")
        return Cache(layers=[PrefixStaticLayer(max_cache_len=slots) for _ in range(config.num_hidden_layers)])

    def _show(self, target_end: int, draft_end: int | None = None) -> None:
        """With ``prefix_only``: the next forwards attend to slots before these ends."""
        if self.prefix_only:
            for layer in self.cache.layers:
                layer.visible = target_end
            if draft_end is not None and self.drafter is not None:
                self.draft_cache.visible = draft_end

    # ------------------------------------------------------------------ the two forwards
    def _target_forward(self, ids: torch.Tensor, position: torch.Tensor, depths: torch.Tensor | None = None,
                        ancestors: torch.Tensor | None = None):
        """The target over ``ids`` (1, W) written at ``position`` ..: logits (W, V) and the tapped
        features (1, W, K*H) (or None). Rewinding the write position is all the "crop" there is:
        the causal mask, built from it, hides every later slot. A tree gives its nodes' ``depths``
        (W,) and ``ancestors`` (W, W) instead, for positions and a tree mask (:mod:`dflash_lite.static_tree`)."""
        for layer in self.cache.layers:
            layer.cumulative_length.copy_(position)
        width, mask = ids.shape[1], None
        positions = (position + (self.offsets[:width] if depths is None else depths))[None]   # (1, W)
        if ancestors is not None:
            mask = tree_mask(ancestors, position, self.cache.layers[0].visible if self.prefix_only else self.slots)
        out = self.target(ids, attention_mask=mask, past_key_values=self.cache, position_ids=positions,
                          use_cache=True,
                          output_hidden_states=[i + 1 for i in self.layer_ids] if self.layer_ids else False)
        hidden = context_features(out.hidden_states, self.layer_ids) if self.layer_ids else None
        return out.logits[0], hidden

    def _draft_forward(self, last: torch.Tensor, features: torch.Tensor, context_start: torch.Tensor,
                       context_end: torch.Tensor):
        """One drafter forward over ``[last, MASK x (B-1)]`` at ``context_end``, with the new context
        ``features`` (1, C, K*H) written from ``context_start``: the drafts' logits (B-1, V)."""
        drafter, b = self.drafter, self.block_size
        block = torch.cat([last, torch.full((b - 1,), self.mask_token_id, dtype=last.dtype, device=last.device)])
        context_positions = context_start + self.offsets[: features.shape[1]]   # (C,)
        block_positions = context_end + self.offsets[:b]                        # (B,)
        cos, sin = self.rope_table
        embeds = self.target.get_input_embeddings()(block[None]).to(cos.dtype)   # (1, B, H)
        context = drafter.project(features.to(cos.dtype))                        # (1, C, H)
        mask = None if self.draft_cache.visible is not None else drafter_mask(self.draft_cache.length, b, context_end)
        writer = self.draft_cache.writer(context_positions)
        x = embeds
        for i, layer in enumerate(drafter.layers):                               # the layers as they are
            x = layer(x, context, (cos[block_positions][None], sin[block_positions][None]),
                      (cos[context_positions][None], sin[context_positions][None]), writer, i, mask)
        head = self.target.get_output_embeddings()
        return head(drafter.norm(x)[0, 1:].to(head.weight.dtype))                # (B-1, V)

    def _warm_up(self, position: int) -> None:
        """Compile and (on CUDA) record each fixed width once, writing only slots that the real
        forwards overwrite before anything reads them (at and after ``position``, masked)."""
        if self.warm or not self.compiled:
            return
        at = torch.tensor(position, device=self.device)
        last = torch.zeros(1, dtype=torch.long, device=self.device)
        for _ in range(3):                              # compile, then warm-up and record the graphs
            _, hidden = self.target_forward(last[None], at)
            if self.tree_size:                          # the tree's width, under a tree mask
                width = self.tree_width
                self.target_forward(last.expand(1, width), at, self.offsets[:width] * 0,
                                    torch.eye(width, dtype=torch.bool, device=self.device))
            if self.block_size > 1 and (self.tree_size is None or self.policy is not None):   # the chain's
                self.target_forward(last.expand(1, self.block_size), at)
            if self.drafter is not None:
                self.draft_forward(last, hidden.expand(1, self.context_width, -1).clone(), at, at)
        self.warm = True

    # ------------------------------------------------------------------ the loop
    @torch.inference_mode()
    def steps(self, input_ids: torch.Tensor, max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
              stop_token_ids=(), generator: torch.Generator | None = None, phase=no_phase):
        """Speculative decoding on static shapes, one :class:`~dflash_lite.decode.Step` per target
        forward as :func:`dflash_lite.decode.steps` yields them. ``phase`` observes two phases:
        ``prefill`` and ``steps`` (draft, verify and accept run as one, with no host sync between)."""
        check_request(self.target, input_ids, max_new_tokens)
        if input_ids.shape[1] + max_new_tokens > self.max_length:
            raise ValueError(f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                             f"this decoder's max_length of {self.max_length}")
        ids, stops = input_ids.to(self.device), set(stop_token_ids)
        processors = sampling.processors()
        if self.policy is not None:
            self.policy.start(self.block_size, self.tree_size)
        with phase("prefill"):
            for layer in self.cache.layers:             # the prompt from slot 0 (eager: its width is the prompt's)
                if layer.is_initialized:
                    layer.cumulative_length.zero_()
            self._show(ids.shape[1], ids.shape[1])
            out = self.target(ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1,
                              output_hidden_states=[i + 1 for i in self.layer_ids] if self.layer_ids else False)
            last = choose_tokens(out.logits[0], sampling, processors, generator)  # (1,) the first new token
            position = ids.shape[1]                      # slots 0..position-1 hold accepted tokens
            self._warm_up(position)
            at = torch.tensor(position, device=self.device)   # the same, on the device, for the forwards
            waiting = []                                 # (features, first slot) no drafter forward has seen yet
            if self.drafter is not None:                 # the prompt's context (eager, once)
                waiting.append((context_features(out.hidden_states, self.layer_ids), torch.zeros_like(at)))
            choice = self._choose(position, max_new_tokens - 1)
            drafted = self._draft(last, waiting, at, position, eager=True) if choice.uses_drafter else None
        emitted, stopped = 1, int(last) in stops
        yield Step([int(last)], None, stopped)
        rule = _Rule(sampling, processors, generator, stops)
        while not stopped and emitted < max_new_tokens:
            with phase("steps"):
                new, n, last, stopped = self._step(last, at, position, drafted, choice, max_new_tokens - emitted,
                                                   rule, waiting)
                position, emitted = position + n + 1, emitted + len(new)
                if not stopped and emitted < max_new_tokens:   # the next step's choice, and its drafter forward
                    choice = self._choose(position, max_new_tokens - emitted)
                    drafted = self._draft(last, waiting, at, position) if choice.uses_drafter else None
            yield Step(new, n + 1, stopped)

    def _choose(self, position: int, budget: int) -> Choice:
        """The next step's draft: the decoder's own, or the policy's, with at most ``budget`` tokens."""
        if self.drafter is None or budget <= 1:
            return Choice(1)
        return self.choice if self.policy is None else self.policy.choose(position, min(self.block_size, budget) - 1)

    def _step(self, last, at, position: int, drafted, choice: Choice, budget: int, rule: _Rule, waiting: list):
        """One static-shape step: verify ``last`` (at ``position``; ``at`` holds it on the device)
        and the drafts of ``choice`` from the last drafter forward's logits (a chain, or a tree built
        from them), accept, and add the accepted rows' features to ``waiting``. Returns (new tokens,
        n, the next last token, stopped); ``at`` moves on in place."""
        k = min(choice.block_size, budget) - 1                               # drafts this step may keep
        tree = None
        if k == 0:                                       # plain decoding: a forward of width 1
            self._show(position + 1)
            logits, hidden = self.target_forward(last[None], at)
            step, rows = self._accept_chain(logits, last[:0], 0, rule)
        elif choice.tree_size:                           # a tree of N drafts from the drafter's logits, width N+1
            tree = draft_static_tree(last, drafted[:k], choice.tree_size, self.tree_width)   # a host read
            self._show(position + self.tree_width)
            logits, hidden = self.target_forward(tree.tokens, at, tree.depths, tree.ancestors)   # (N+1, V)
            path, next_token = accept_tree(tree.tree, logits[: len(tree.tree)], rule.sampling, rule.processors,
                                           rule.generator)                       # the target's choices: a host read
            step = [len(path) - 1] + [tree.node_tokens[i] for i in path[1:]] + [next_token]
            rows = torch.tensor(path, device=self.device)
            keep_path(self.cache.layers, position, rows)  # the path's K/V into consecutive slots
        else:                                            # a chain: the drafts of the last drafter forward
            drafts = drafted.argmax(dim=-1)                                       # (B-1,)
            self._show(position + self.block_size)
            logits, hidden = self.target_forward(torch.cat([last, drafts])[None], at)   # (B, V)
            step, rows = self._accept_chain(logits, drafts, k, rule)
        n, next_token = step[0], step[-1]
        if self.policy is not None:
            self.policy.observe(choice, step[1:-1] if tree is not None else step[1: k + 1], n,
                                None if tree is None else tree.tree)
        new, stopped = cut_at_stop(step[1: n + 1] + [next_token], rule.stops)   # a stop ends the output there
        if self.drafter is not None:                     # the accepted rows' features, for the next drafter forward
            waiting.append((hidden[:, : n + 1] if rows is None else hidden[:, rows], at.clone()))
        at.fill_(position + n + 1)                       # the verified slots before it stay
        return new, n, torch.full((1,), next_token, dtype=torch.long, device=self.device), stopped

    def _draft(self, last, waiting: list, at, position: int, eager: bool = False) -> torch.Tensor:
        """The drafter forward over ``[last, MASK x (B-1)]`` at ``at``, after writing the ``waiting``
        context (emptied): the drafts' logits (B-1, V). With fixed shapes every forward writes
        ``context_width`` positions: a shorter context is padded (the padding lies past the mask and
        is overwritten before it is read), and a longer one (after plain steps) goes in chunks, each
        through a forward whose drafts are dropped. ``eager``: the prompt's, whatever its length."""
        features, start = torch.cat([f for f, _ in waiting], dim=1), waiting[0][1]   # (1, C, K*H)
        waiting.clear()
        self._show(position, position)
        if eager:
            return self._draft_forward(last, features, start, at)
        if self.prefix_only:
            return self.draft_forward(last, features, start, at)
        width = self.context_width
        while features.shape[1] > width:                 # catching up: context only, the drafts are dropped
            self.draft_forward(last, features[:, :width], start, start + width)
            features, start = features[:, width:], start + width
        features = torch.cat([features, features[:, -1:].expand(1, width - features.shape[1], -1)], dim=1)
        return self.draft_forward(last, features, start, at).clone()

    def _accept_chain(self, logits, drafts, k: int, rule: _Rule):
        """Accept ``drafts[:k]`` after ``last`` from the target's ``logits`` (k+1.., V): the step as
        [n, d1..dn, next token] (the one host read) and the verify rows that stay (None: the first n+1)."""
        if rule.sampling.greedy and k == 0:              # nothing to verify: the target's own token
            return [0, int(logits[0].argmax())], None
        if rule.sampling.greedy:                         # on the device: keep drafts while the target agrees
            choice = logits.argmax(dim=-1)                                        # (W,)
            agree = (drafts[:k] == choice[:k]).long().cumprod(dim=0)              # 1 until the first miss
            n = agree.sum()
            return torch.cat([n[None], drafts[:k], choice.gather(0, n[None])]).tolist(), None   # the one host sync
        p = target_probs(logits[: k + 1], rule.sampling, rule.processors)        # the lossless point-mass rule,
        n, next_token = accept_point_mass(drafts[:k], p, rule.generator)         # as in decode.accept   (k+1, V)
        return [n] + drafts[:k].tolist() + [next_token], None

    def generate(self, input_ids: torch.Tensor, max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
                 stop_token_ids=(), generator: torch.Generator | None = None) -> GenerationResult:
        """:meth:`steps` to the end, every step collected, as :func:`dflash_lite.decode.generate`."""
        timer = PhaseTimer(self.device)
        result = GenerationResult(input_ids.shape[1], phase_times=timer.seconds)
        for step in self.steps(input_ids, max_new_tokens, sampling, stop_token_ids, generator, timer):
            result.record(step)
        return result


# ---------------------------------------------------------------------- the benchmark's rows
def static_methods(target, drafter: DFlashDrafter | None, block_sizes, max_length: int,
                   sampling: SamplingParams = SamplingParams(), stop_token_ids=(), tree_sizes=()) -> list[Method]:
    """``bench --compile`` (docs/method.md#measuring): plain decoding, and DFlash chains of each of
    ``block_sizes``, draft trees of each of ``tree_sizes`` nodes (at the drafter's block size) and,
    with trees, the static policy over plain decoding, the chain and the largest tree, when a
    drafter is given, on this path. Each decoder is built once, here, for prompt + new
    tokens up to ``max_length``; on CUDA its forwards are compiled and recorded in its first run,
    which the benchmark's untimed warm-up pass is."""
    def row(name: str, decoder: StaticDecoder, kind: Kind) -> Method:
        how = "static, CUDA graphs" if decoder.compiled and decoder.device.type == "cuda" else (
            "static, compiled" if decoder.compiled else "static")

        def run(ids, n):
            result = decoder.generate(ids, n, sampling, stop_token_ids)
            return result.tokens, result
        return Method(f"{name} ({how})", run, kind, block_size=decoder.block_size, tree_size=decoder.tree_size)

    methods = [row("autoregressive", StaticDecoder(target, max_length=max_length), Kind.STATIC_AUTOREGRESSIVE)]
    for b in block_sizes if drafter is not None else ():
        methods.append(row(f"DFlash B={b}", StaticDecoder(target, drafter, b, max_length), Kind.STATIC_DFLASH))
    for n in tree_sizes if drafter is not None else ():
        methods.append(row(f"DFlash tree N={n}", StaticDecoder(target, drafter, max_length=max_length, tree_size=n),
                           Kind.STATIC_DFLASH_TREE))
    if drafter is not None and tree_sizes:          # the policy over plain, the chain and the largest tree
        decoder = StaticDecoder(target, drafter, max_length=max_length, tree_size=max(tree_sizes))
        policy_row = row("DFlash (ours) cost-aware", decoder, Kind.STATIC_DFLASH_POLICY)
        methods.append(replace(policy_row, run=_with_policy(decoder, policy_row.run)))
    return methods


def _with_policy(decoder: StaticDecoder, run):
    """``run``, with the decoder's :class:`~dflash_lite.static_policy.StaticPolicy` made at its first
    call: step costs measured at that prompt (in the benchmark's untimed warm-up), the default's
    options less prompt lookup; its estimates then carry from prompt to prompt, as an Engine's."""
    def first_then_run(ids, n):
        if decoder.policy is None:
            costs = step_costs(decoder.target, decoder.drafter, ids, decoder.block_size, (decoder.tree_size,), 3)
            decoder.policy = StaticPolicy(costs, NO_NGRAM_OPTIONS)
        return run(ids, n)
    return first_then_run
