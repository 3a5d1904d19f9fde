"""Fixed shapes and compiled forwards, an option of the one decode loop, not another loop
(docs/method.md#fixed-shapes-and-compilation): the loop asks its :class:`Shapes` for a request's
caches and to run each forward. :data:`EAGER` runs every forward as wide as its input;
:class:`FixedShapes` keeps its caches, pads each verify to a bucket (:func:`pad`) and compiles."""
from __future__ import annotations

import torch

from .cache import SlotCache

BUCKETS = (1, 2, 4, 8, 16, 32, 64)      # verify widths of a fixed-shape loop (vLLM's capture sizes)
HEADROOM = 64           # slots an eager cache holds past prompt + new tokens before it grows


def pad(ids: torch.Tensor, depths: torch.Tensor | None, ancestors: torch.Tensor | None,
        width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A verify of w tokens per row (``ids`` (R, w); ``depths`` (w,) or (R, w) and ``ancestors``
    (w, w) or (R, w, w), None: a chain) laid out on ``width`` tokens: padding tokens repeat the
    first token at depth 0 and see only themselves (and the committed context), so no real token
    ever attends to one. One row gives (1, width), (width,), (width, width); more, all per row."""
    rows, w = ids.shape
    device = ids.device
    if w > width:
        raise ValueError(f"a draft of {w} rows does not fit a verify of width {width}")
    depths = torch.arange(w, device=device) if depths is None else depths
    if ancestors is None:
        ancestors = torch.ones(w, w, dtype=torch.bool, device=device).tril()
    mask = torch.eye(width, dtype=torch.bool, device=device).repeat(rows, 1, 1)
    mask[:, :w, :w] = ancestors
    depths = torch.cat([depths.expand(rows, w), depths.new_zeros(rows, width - w)], dim=1)
    ids = torch.cat([ids, ids[:, :1].expand(rows, width - w)], dim=1)
    return (ids, depths[0], mask[0]) if rows == 1 else (ids, depths, mask)


class Shapes:
    """Eager shapes (:data:`EAGER`): every forward as wide as its input."""
    fixed = False
    compiled = False

    def target_cache(self, target, length: int, rows: int = 1) -> SlotCache:
        """The target's cache for ``rows`` requests of up to ``length`` tokens (prompt + new)."""
        return SlotCache.for_target(target, length + HEADROOM, rows)

    def drafter_cache(self, drafter, device, rows: int = 1) -> SlotCache:
        return SlotCache(drafter.config.num_layers, rows=rows, device=device)

    def verify(self, forward, ids, depths=None, ancestors=None, key="verify"):
        """``forward(ids, depths, ancestors)`` -> (logits (R, w, V), features (R, w, K*H) or None).
        ``key`` names the forward (the taps it reads): one compiled function per key."""
        return forward(ids, depths, ancestors)

    def draft(self, drafter, target, cache, block, features, start, lengths=None,
              block_lengths=None):
        """One drafter forward over ``block`` (R, B) after the new context ``features``
        (R, C, K*H) at ``start`` (an int, or per row); ``lengths``: per row, how much of its
        context is real (None: all C); ``block_lengths``: per row, how much of the block it
        drafts with (None: all B). The logits of the block's masked slots (R, B-1, V)."""
        device = block.device
        end = None                                      # the block follows all C
        blocks = None if block_lengths is None else torch.tensor(block_lengths, device=device)
        if lengths is not None:
            start = torch.tensor(start, device=device)
            end = start + torch.tensor(lengths, device=device)
        return drafter.draft_logits(target, block, features, start, cache, end, blocks)


EAGER = Shapes()


class FixedShapes(Shapes):
    """Fixed shapes: caches of ``length`` slots, ``compile``: compiled forwards,
    ``buckets``: the verify widths, ``context_width``: the drafter's new context per forward."""
    fixed = True

    def __init__(self, length: int, compile: bool = False, buckets=BUCKETS,
                 context_width: int = 16):
        self.length, self.compiled = length, compile
        self.buckets, self.context_width = tuple(sorted(set(buckets))), context_width
        self.caches: dict[str, SlotCache] = {}
        self.forwards: dict[str, object] = {}

    def width(self, w: int) -> int:
        return next((b for b in self.buckets if b >= w), w)

    def _cache(self, key: str, make, rows: int = 1) -> SlotCache:
        key = key if rows == 1 else f"{key}:{rows}"
        if key not in self.caches:          # a batch keeps its rows on fixed shapes: one per size
            self.caches[key] = make()
        self.caches[key].rewind(0)
        return self.caches[key]

    def target_cache(self, target, length: int, rows: int = 1) -> SlotCache:
        if length > self.length:
            raise ValueError(f"prompt + max_new_tokens ({length} tokens) exceeds these fixed "
                             f"shapes' length of {self.length}")
        return self._cache("target", lambda: SlotCache.for_target(target, self.slots, rows,
                                                                  fixed=True), rows)

    @property
    def slots(self) -> int:             # room for a padded last draft
        return self.length + max(self.buckets[-1], self.context_width)

    def drafter_cache(self, drafter, device, rows: int = 1) -> SlotCache:
        if not drafter.fixed_shapes:
            raise ValueError(f"{type(drafter).__name__} has no fixed-shape forward; run it eager")
        drafter.rope_table(self.slots + self.context_width, device)   # a compiled forward reads it

        def make():
            config = drafter.config
            cache = SlotCache(config.num_layers, self.slots, rows, fixed=True, device=device)
            cache.allocate(config.num_key_value_heads, config.head_dim, drafter.fc.weight.dtype)
            return cache
        return self._cache("drafter", make, rows)

    def _run(self, key: str, forward, *args):
        """``forward(*args)``, compiled the first time for ``key`` (the same target and caches)."""
        if not self.compiled:
            return forward(*args)
        rows = args[0].shape[0]
        key = key if rows == 1 else (key, rows)     # one function per batch size too
        if key not in self.forwards:
            # one graph per bucket width, per set of taps and per batch size: more than dynamo's 8
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
            mode = "reduce-overhead" if args[0].device.type == "cuda" else None
            self.forwards[key] = torch.compile(forward, mode=mode, dynamic=False)
        out = self.forwards[key](*args)
        # a CUDA graph reuses its output buffers on the next replay: copy them out
        return tuple(None if t is None else t.clone() for t in out) if isinstance(out, tuple) \
            else out.clone()

    def verify(self, forward, ids, depths=None, ancestors=None, key="verify"):
        w = ids.shape[1]
        logits, features = self._run(key, forward, *pad(ids, depths, ancestors, self.width(w)))
        return logits[:, :w], None if features is None else features[:, :w]

    def draft(self, drafter, target, cache, block, features, start, lengths=None,
              block_lengths=None):
        width, device, rows = self.context_width, block.device, block.shape[0]

        def forward(block, features, start, end, block_lengths):
            return drafter.draft_forward(target, block, features, start, cache, end, block_lengths)
        blocks = torch.tensor([block.shape[1]] * rows if block_lengths is None else block_lengths,
                              device=device)
        starts = torch.tensor(start, device=device).view(-1).expand(rows)
        lengths = torch.full((rows,), features.shape[1], device=device) if lengths is None \
            else torch.tensor(lengths, device=device)
        # chunks of one width; only the last one's drafts are read, the others only write their
        # context (a row whose context ran out writes padding past its end, which stays hidden)
        for offset in range(0, max(features.shape[1], 1), width):
            chunk = features[:, offset: offset + width]
            chunk = torch.nn.functional.pad(chunk, (0, 0, 0, width - chunk.shape[1]))
            begin = starts + lengths.clamp(max=offset)
            end = starts + lengths.clamp(max=offset + width)
            logits = self._run("draft", forward, block, chunk, begin, end, blocks)
        return logits
