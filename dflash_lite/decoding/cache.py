"""The one KV cache of the decode loop, for the target and the drafter alike: :class:`SlotCache`,
a transformers ``Cache`` with a write position per row, whose forwards see the filled slots only
(``fixed=False``) or the whole buffer under a mask (``fixed=True``)
(docs/method.md#one-cache-and-its-write-position)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, CacheLayerMixin

MIN_SLOTS = 256     # an eager cache that has to grow doubles from here


class SlotLayer(CacheLayerMixin):
    """One layer's buffers and write position; made at its first write (heads, dtype, device)."""
    is_sliding = False

    @property
    def is_compileable(self) -> bool:      # transformers keeps a one-token forward's mask when True
        return self.cache.fixed

    def __init__(self, cache: "SlotCache"):
        super().__init__()
        self.cache = cache
        self.starts = [0] * cache.rows          # eager: the write position per row, on the host
        self.at: torch.Tensor | None = None     # fixed: the same on the device

    def lazy_initialization(self, key_states, value_states) -> None:
        c = self.cache
        if c.device != key_states.device:          # an eager cache lives where its first write does
            c.device = key_states.device
            c.ends = c.ends.to(c.device)
            for layer in c.layers:
                layer.at = layer.at.to(c.device)
        shape = (c.rows, key_states.shape[1], c.length, key_states.shape[-1])
        self.keys = torch.zeros(shape, dtype=key_states.dtype, device=key_states.device)
        self.values = torch.zeros(shape, dtype=value_states.dtype, device=value_states.device)
        self.is_initialized = True

    def _grow(self, needed: int) -> None:
        c = self.cache
        c.length = max(2 * c.length, 1 << (needed - 1).bit_length())
        for layer in c.layers:
            if layer.is_initialized:                            # zeros after the filled slots
                grown = (0, 0, 0, c.length - layer.keys.shape[2])
                layer.keys, layer.values = F.pad(layer.keys, grown), F.pad(layer.values, grown)

    def update(self, key_states, value_states, *args, **kwargs):
        """Write (rows, kv, W, D) at the write position, move it on by W; return what a forward
        may attend to: the filled slots (eager) or the whole buffer (fixed)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        width = key_states.shape[-2]
        if self.cache.fixed:
            self._write(self.at, key_states, value_states)
            self.at.add_(width)
            return self.keys, self.values
        end = max(self.starts) + width
        if end > self.cache.length:
            self._grow(end)
        if self.cache.rows == 1:
            s = self.starts[0]
            self.keys[:, :, s: s + width] = key_states
            self.values[:, :, s: s + width] = value_states
        else:
            starts = torch.tensor(self.starts, device=self.keys.device)
            self._write(starts, key_states, value_states)
        self.starts = [s + width for s in self.starts]
        return self.keys[:, :, :end], self.values[:, :, :end]

    def _write(self, starts: torch.Tensor, key_states, value_states) -> None:
        """Row r's new (kv, W, D) into slots ``starts[r] ..`` of the (rows, kv, L, D) buffers."""
        index = starts[:, None] + torch.arange(key_states.shape[-2], device=starts.device)
        for buffer, new in ((self.keys, key_states), (self.values, value_states)):
            if buffer.shape[0] == 1:
                buffer.index_copy_(2, index[0], new)
            else:
                buffer.scatter_(2, index[:, None, :, None].expand_as(new), new)

    def get_seq_length(self) -> int:
        return self.starts[0]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return (self.cache.length if self.cache.fixed else max(self.starts) + query_length), 0

    def get_max_length(self) -> int:
        return self.cache.length


class SlotCache(Cache):
    """``num_layers`` layers for ``rows`` sequences in slots ``0 .. length - 1``; ``length`` None:
    eager, from :data:`MIN_SLOTS` slots, doubling when a forward needs more; fixed never grows."""

    def __init__(self, num_layers: int, length: int | None = None, rows: int = 1,
                 fixed: bool = False, device: torch.device | str | None = None):
        if fixed and length is None:
            raise ValueError("a fixed-shape cache needs its length")
        self.rows, self.fixed, self.length = rows, fixed, length or MIN_SLOTS
        super().__init__(layers=[SlotLayer(self) for _ in range(num_layers)])
        self.device = torch.device(device or "cpu")
        self.ends = torch.zeros(rows, dtype=torch.long, device=self.device)   # where a mask ends
        for layer in self.layers:
            layer.at = torch.zeros(rows, dtype=torch.long, device=self.device)

    @classmethod
    def for_target(cls, model, length: int | None = None, rows: int = 1,
                   fixed: bool = False) -> "SlotCache":
        cache = cls(model.config.num_hidden_layers, length, rows, fixed, model.device)
        if fixed:               # allocated now: a compiled forward never sees the first write
            config = model.config
            head_dim = (getattr(config, "head_dim", None)
                        or config.hidden_size // config.num_attention_heads)
            cache.allocate(config.num_key_value_heads, head_dim, model.dtype)
        return cache

    def allocate(self, kv_heads: int, head_dim: int, dtype: torch.dtype) -> None:
        """Allocate every layer's buffers now, rather than at the first write."""
        empty = torch.empty(self.rows, kv_heads, 0, head_dim, dtype=dtype, device=self.device)
        for layer in self.layers:
            layer.lazy_initialization(empty, empty)
        if self.fixed:      # the same addresses every call, so a CUDA graph may write into them
            for t in self.buffers():
                torch._dynamo.mark_static_address(t)

    def buffers(self) -> list[torch.Tensor]:
        """What a forward updates in place: mask ends, then per layer K, V and write positions."""
        return [self.ends, *(t for x in self.layers for t in (x.keys, x.values, x.at))]

    @property
    def position(self) -> int:
        """The write position of row 0 (the only row of a single request)."""
        return self.layers[0].starts[0]

    def write_positions(self) -> torch.Tensor:
        """(rows,) where the next forward writes, on the device (a fixed cache keeps it there)."""
        if self.fixed:
            return self.layers[0].at
        return torch.tensor(self.layers[0].starts, device=self.device)

    def rewind(self, to, end=None) -> None:
        """The next forward writes from slot ``to`` (an int, a per-row list, or on a fixed cache a
        (rows,) device tensor); the slots before it are the committed ones. ``end``: on a fixed
        cache, where the slots a drafter forward may see end (default: after what it writes)."""
        if isinstance(to, torch.Tensor) and self.fixed:
            for layer in self.layers:
                layer.at.copy_(to)
            if end is not None:
                self.ends.copy_(end)
            return
        to = to.tolist() if isinstance(to, torch.Tensor) else to
        starts = [int(to)] * self.rows if isinstance(to, int) else [int(v) for v in to]
        for layer in self.layers:
            layer.starts = list(starts)
        if self.fixed or (self.rows > 1 and end is not None):
            value = torch.tensor(starts, device=self.device)
            if self.fixed:
                for layer in self.layers:
                    layer.at.copy_(value)
            ends = (value if end is None else torch.as_tensor(end, device=self.device)
                    ).expand(self.rows)
            if self.fixed:
                self.ends.copy_(ends)           # in place: its address is a graph's input
            else:
                self.ends = ends.clone()

    def keep_path(self, position: int, path: list[int]) -> None:
        """:meth:`keep_paths` with the same ``position`` and ``path`` for every row."""
        self.keep_paths([position] * self.rows, [path] * self.rows)

    def keep_paths(self, positions: list[int], paths: list[list[int]]) -> None:
        """Per row r, the K/V of verify rows ``paths[r]`` (written from slot ``positions[r]``, root
        first) move to consecutive slots from there, and the row's next write starts after them."""
        device = self.layers[0].keys.device
        for r, (position, path) in enumerate(zip(positions, paths)):
            if path == list(range(len(path))):
                continue
            source = torch.tensor(path, device=device) + position
            target = torch.arange(position, position + len(path), device=device)
            for layer in self.layers:
                for buffer in (layer.keys, layer.values):
                    row = buffer[r: r + 1] if self.rows > 1 else buffer
                    row.index_copy_(2, target, row.index_select(2, source))
        self.rewind([p + len(path) for p, path in zip(positions, paths)])

    def keep(self, index: list[int]) -> None:
        """Only the rows ``index`` stay, in that order (finished requests leave the batch)."""
        keep = torch.tensor(index, device=self.device)
        for layer in self.layers:
            if layer.is_initialized:
                layer.keys = layer.keys.index_select(0, keep.to(layer.keys.device))
                layer.values = layer.values.index_select(0, keep.to(layer.values.device))
            layer.starts = [layer.starts[i] for i in index]
            layer.at = layer.at.index_select(0, keep.to(layer.at.device))
        self.ends = self.ends.index_select(0, keep.to(self.ends.device))
        self.rows = len(index)

    # ------------------------------------------------------------------ what a forward sees
    def verify_mask(self, width: int, ancestors: torch.Tensor | None = None,
                    depths: torch.Tensor | None = None, sliding_window: int | None = None,
                    lengths: torch.Tensor | None = None):
        """The target's mask for a forward of ``width`` tokens per row from the write position:
        every committed slot, and among the new slots each token's ``ancestors``, (W, W) or
        (R, W, W) (None: a chain, the lower triangle). ``lengths`` (R,): row r's keys past its
        length hidden (a prompt batch padded on the right). ``depths`` (W,) or (R, W): position
        offsets, for a sliding window. Returns {layer type: (rows, 1, W, visible) bool or None};
        None: nothing to hide (one token, or a prompt from slot 0: SDPA's causal flag)."""
        device = self.device
        start = None if self.fixed else self.position     # a compiled forward reads no host state
        if not self.fixed and self.rows == 1 and sliding_window is None and lengths is None \
                and (width == 1 or (start == 0 and ancestors is None)):
            return {"full_attention": None}
        if ancestors is None:
            ancestors = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        if lengths is not None:
            ancestors = ancestors & (torch.arange(width, device=device)[None, None]
                                     < lengths.to(device)[:, None, None])
        if self.fixed or self.rows > 1:
            at = self.write_positions()
            slots = self.length if self.fixed else int(at.max()) + width
            relative = torch.arange(slots, device=device)[None] - at[:, None]            # (R, L)
            inside = (relative >= 0) & (relative < width)
            where = relative.clamp(0, width - 1)
            part = ancestors[:, where].permute(1, 0, 2) if ancestors.ndim == 2 else \
                ancestors.gather(2, where[:, None].expand(-1, width, -1))               # (R, W, L)
            mask = ((part & inside[:, None]) | (relative < 0)[:, None])[:, None]
        else:
            mask = torch.cat([torch.ones(width, start, dtype=torch.bool, device=device),
                              ancestors.view(width, width)], dim=1)[None, None]
        masks = {"full_attention": mask}
        if sliding_window is not None:
            masks["sliding_attention"] = mask & self._window(mask, depths, sliding_window)
        return masks

    def _window(self, mask, depths, window: int) -> torch.Tensor:
        """True where a key is within ``window`` positions before the query (transformers' rule)."""
        rows, _, width, slots = mask.shape
        at = self.write_positions()
        depths = torch.arange(width, device=mask.device) if depths is None else depths
        query = at[:, None] + depths.expand(rows, -1)                                   # (R, W)
        key = torch.arange(slots, device=mask.device)[None].expand(rows, -1)            # (R, L)
        relative = key - at[:, None]
        inside = (relative >= 0) & (relative < width)
        depth = depths.expand(rows, -1).gather(1, relative.clamp(0, width - 1))
        key = torch.where(inside, at[:, None] + depth, key)
        return (query[:, :, None] - key[:, None, :] < window)[:, None]

    def context_mask(self, block_width: int, new: int = 0,
                     block_lengths: torch.Tensor | None = None):
        """The drafter's mask for a forward that writes ``new`` context slots, then a block of
        ``block_width`` (never stored): (rows, 1, 1, L + B), the context (fixed or a batch: the
        slots before each row's ``ends``) and the block; None on an eager cache of one row with a
        whole block. ``block_lengths`` (R,): row r's block is its first ``block_lengths[r]``."""
        if block_lengths is None and not self.fixed and self.rows == 1:
            return None
        slots = self.key_positions(new)                                                  # (R, L)
        context = slots < self.ends[:, None] if self.fixed or self.rows > 1 \
            else torch.ones_like(slots, dtype=torch.bool)
        block = torch.arange(block_width, device=self.device)[None]
        block = block >= 0 if block_lengths is None else block < block_lengths.view(-1, 1)
        return torch.cat([context, block.expand(self.rows, -1)], dim=1)[:, None, None]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """The drafter's write of new context (rows, kv, C, D) into ``layer``; what it sees."""
        return self.layers[layer].update(k, v)

    def positions(self, width: int, depths: torch.Tensor | None = None) -> torch.Tensor:
        """(rows, W) position ids of a forward of ``width`` rows written from the write position:
        consecutive, or the write position plus each row's ``depths`` (W,) (a tree)."""
        offsets = torch.arange(width, device=self.device) if depths is None else depths
        if self.fixed or self.rows > 1:
            return self.write_positions()[:, None] + offsets.expand(self.rows, -1)
        return (offsets + self.position).view(1, -1)

    def key_positions(self, new: int) -> torch.Tensor:
        """(rows, visible) absolute positions of the slots a forward writing ``new`` slots sees."""
        visible = self.length if self.fixed else max(self.layers[0].starts) + new
        return torch.arange(visible, device=self.device)[None].expand(self.rows, -1)
