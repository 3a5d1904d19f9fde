"""Fixed shapes and compiled forwards: an option of the one decode loop, not another loop
(docs/method.md#fixed-shapes-and-compilation).

:func:`dflash_lite.decode.steps` asks its :class:`Shapes` for a request's caches, for the width a
forward of w rows runs at, and to run the forward. :data:`EAGER` answers with caches that show
their filled slots, w itself, and the forward as it is. :class:`FixedShapes` answers as gpt-fast
and vLLM's CUDA-graph path do:

* **caches allocated once** for ``length`` slots and kept from request to request, masked over
  the whole buffer (:class:`~dflash_lite.cache.SlotCache` with ``fixed=True``);
* **buckets**: a verify of w rows is padded to the smallest bucket width >= w (padding rows repeat
  the root at depth 0 and see only the context and themselves: :func:`pad`); the drafter's new
  context goes in chunks of one width, the last padded;
* **compiled forwards** (``compile=True``): each forward through ``torch.compile``, in
  ``reduce-overhead`` mode (CUDA graphs) on CUDA, one graph per bucket, recorded on first use.
"""
from __future__ import annotations

import torch

from .cache import SlotCache

BUCKETS = (1, 2, 4, 8, 16, 32, 64)      # verify widths of a fixed-shape loop (vLLM's capture sizes)
HEADROOM = 64           # slots an eager cache holds past prompt + new tokens before it grows


def pad(ids: torch.Tensor, depths: torch.Tensor | None, ancestors: torch.Tensor | None,
        width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A verify of w rows (``ids`` (1, w); ``depths`` None and ``ancestors`` None: a chain) laid out
    on ``width`` rows: padding rows repeat the first token at depth 0 and see only themselves (and
    the committed context), so no real row ever attends to one."""
    w, device = ids.shape[1], ids.device
    if w > width:
        raise ValueError(f"a draft of {w} rows does not fit a verify of width {width}")
    depths = torch.arange(w, device=device) if depths is None else depths
    mask = torch.eye(width, dtype=torch.bool, device=device)
    mask[:w, :w] = torch.ones(w, w, dtype=torch.bool, device=device).tril() \
        if ancestors is None else ancestors
    return (torch.cat([ids, ids[:, :1].expand(1, width - w)], dim=1),
            torch.cat([depths, depths.new_zeros(width - w)]), mask)


class Shapes:
    """Eager shapes (:data:`EAGER`): every forward as wide as its input."""
    fixed = False
    compiled = False

    def target_cache(self, target, length: int) -> SlotCache:
        """The target's cache for a request of ``length`` tokens (prompt + new tokens)."""
        return SlotCache.for_target(target, length + HEADROOM)

    def drafter_cache(self, drafter, device) -> SlotCache:
        return SlotCache(drafter.config.num_layers, device=device)

    def verify(self, forward, ids, depths=None, ancestors=None, key="verify"):
        """``forward(ids, depths, ancestors)`` -> (logits (w, V), features (1, w, K*H) or None).
        ``key`` names the forward (the taps it reads): one compiled function per key."""
        return forward(ids, depths, ancestors)

    def draft(self, drafter, target, cache, block, features, start: int):
        """One drafter forward over ``block`` (1, B) after the new context ``features`` (1, C, K*H)
        at ``start``: the logits of the block's masked slots (1, B-1, V)."""
        return drafter.draft_logits(target, block, features, start, cache)


EAGER = Shapes()


class FixedShapes(Shapes):
    """Every forward at one of a few fixed widths, on caches of ``length`` slots kept across
    requests; ``compile``: the forwards through ``torch.compile`` (CUDA graphs on CUDA).
    ``buckets``: the verify widths; ``context_width``: the drafter's new context per forward."""
    fixed = True

    def __init__(self, length: int, compile: bool = False, buckets=BUCKETS,
                 context_width: int = 16):
        self.length, self.compiled = length, compile
        self.buckets, self.context_width = tuple(sorted(set(buckets))), context_width
        self.caches: dict[str, SlotCache] = {}
        self.forwards: dict[str, object] = {}

    def width(self, w: int) -> int:
        return next((b for b in self.buckets if b >= w), w)

    def _cache(self, key: str, make) -> SlotCache:
        if key not in self.caches:
            self.caches[key] = make()
        cache = self.caches[key]
        cache.rewind(0)
        return cache

    def target_cache(self, target, length: int) -> SlotCache:
        if length > self.length:
            raise ValueError(f"prompt + max_new_tokens ({length} tokens) exceeds these fixed "
                             f"shapes' length of {self.length}")
        return self._cache("target", lambda: SlotCache.for_target(target, self.slots, fixed=True))

    @property
    def slots(self) -> int:
        # room for a padded last draft
        return self.length + max(self.buckets[-1], self.context_width)

    def drafter_cache(self, drafter, device) -> SlotCache:
        if not drafter.fixed_shapes:
            raise ValueError(f"{type(drafter).__name__} has no fixed-shape forward; run it eager")
        # what a compiled forward reads
        drafter.rope_table(self.slots + self.context_width, device)
        def make():
            cache = SlotCache(drafter.config.num_layers, self.slots, fixed=True, device=device)
            config = drafter.config
            cache.allocate(config.num_key_value_heads, config.head_dim, drafter.fc.weight.dtype)
            return cache
        return self._cache("drafter", make)

    def _run(self, key: str, forward, *args):
        """``forward(*args)``, compiled the first time for ``key`` (the same target and caches)."""
        if not self.compiled:
            return forward(*args)
        if key not in self.forwards:
            # one graph per bucket width and per set of taps: more than dynamo's default of 8
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
            device = args[0].device.type
            # CUDA graphs exist on CUDA only
            mode = "reduce-overhead" if device == "cuda" else None
            self.forwards[key] = torch.compile(forward, mode=mode, dynamic=False)
        out = self.forwards[key](*args)
        return tuple(None if t is None else t.clone() for t in out) if isinstance(out, tuple) \
            else out.clone()  # a graph's outputs are reused

    def verify(self, forward, ids, depths=None, ancestors=None, key="verify"):
        w = ids.shape[1]
        logits, features = self._run(key, forward, *pad(ids, depths, ancestors, self.width(w)))
        return logits[:w], None if features is None else features[:, :w]

    def draft(self, drafter, target, cache, block, features, start: int):
        width, device = self.context_width, block.device

        def forward(block, features, start, end):
            return drafter.draft_forward(target, block, features, start, cache, end)
        # chunks of one width; only the last one's drafts
        while True:
            # are read, the others only write their context
            chunk = features[:, :width]
            end = start + chunk.shape[1]
            chunk = torch.cat([chunk, chunk.new_zeros(1, width - chunk.shape[1], chunk.shape[-1])],
                              dim=1)
            logits = self._run("draft", forward, block, chunk, torch.tensor([start], device=device),
                               torch.tensor([end], device=device))
            features, start = features[:, width:], end
            if features.shape[1] == 0:
                return logits
