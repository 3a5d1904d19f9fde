"""The DFlash drafter (paper section 3; docs/method.md#the-drafter): :class:`DFlashDrafter`, Qwen3
layers with KV injection (:class:`KVInjectionAttention`) over the projected target features, and
the target's frozen embedding and LM head, passed in. Its weight names are the public DFlash
layout's, and it honours that layout's RoPE scaling and sliding-window layers."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RotaryEmbedding, rotate_half

from .cache import SlotCache
from .drafter_config import (Conditioning, DrafterConfig, Drafting,  # noqa: F401 (public)
                             check_compatible)


class RMSNorm(nn.Module):
    """Qwen3's RMSNorm (same ``weight``, same fp32 arithmetic) as one ``F.rms_norm`` call: a drafter
    forward runs a dozen of them on a handful of rows, where the op count is the cost."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps
        self.shape = (hidden_size,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == self.weight.dtype:
            return F.rms_norm(x, self.shape, self.weight, self.eps)
        # Qwen3's mixed case
        return self.weight * F.rms_norm(x.float(), self.shape, None, self.eps).to(x.dtype)


STATIC_ROPE = ("default", "linear", "llama3", "yarn")    # cos/sin depend on the position only


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (N, heads, T, D) by per-position cos/sin of shape (N, T, D)."""
    return x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1)


class KVInjectionAttention(nn.Module):
    """Queries from the block; keys/values from [context ; block]; SDPA."""

    def __init__(self, config: DrafterConfig):
        super().__init__()
        h, d = config.hidden_size, config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = d
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=config.attention_bias)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=config.attention_bias)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=config.attention_bias)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=config.attention_bias)
        self.q_norm = RMSNorm(d, eps=config.rms_norm_eps)
        self.k_norm = RMSNorm(d, eps=config.rms_norm_eps)

    def forward(self, block, context, block_rope, context_rope, cache: SlotCache | None, layer: int,
                attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The block's attention output (N, B, H). ``attn_mask`` (boolean, True = may attend) spans
        all keys, [cached context ; new context ; block]; None: every block position sees every
        key (bidirectional inside the block)."""
        k, v = self.keys_values(block, context, block_rope, context_rope, cache, layer)
        return self.attend(block, block_rope, k, v, attn_mask)

    def attend(self, x, rope, k, v, attn_mask=None) -> torch.Tensor:
        """Attention of ``x`` (N, T, H) at ``rope``'s positions to K/V (N, kv, S, D): (N, T, H)."""
        n, t, _ = x.shape
        q = apply_rope(self.q_norm(self.q_proj(x).view(n, t, self.num_heads, self.head_dim))
                       .transpose(1, 2), *rope)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                             enable_gqa=self.num_heads != self.num_kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(n, t, -1))

    def keys_values(self, block, context, block_rope, context_rope, cache, layer):
        """KV injection: K/V of [context ; block] projected in one go; the new context is cached."""
        x, c = torch.cat([context, block], dim=1), context.shape[1]
        n, t, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(n, t, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(n, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        k = apply_rope(k, *[torch.cat(pair, dim=1) for pair in zip(context_rope, block_rope)])
        if cache is None:
            return k, v
        k_ctx, v_ctx = cache.append(layer, k[:, :, :c], v[:, :, :c])      # all context so far
        return torch.cat([k_ctx, k[:, :, c:]], dim=2), torch.cat([v_ctx, v[:, :, c:]], dim=2)


class DrafterLayer(nn.Module):
    attention = KVInjectionAttention

    def __init__(self, config: DrafterConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = self.attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = Qwen3MLP(config)

    def forward(self, x, context, block_rope, context_rope, cache, layer, attn_mask=None):
        """``attn_mask`` is this layer's own: a sliding-window layer gets the window's mask."""
        x = x + self.self_attn(self.input_layernorm(x), context, block_rope, context_rope, cache,
                               layer, attn_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    """The paper's drafter (block drafting, KV injection), with the target's embedding and LM head
    passed in, never stored; the ablations subclass it (:mod:`dflash_lite.decoding.variants`)."""

    variants = {("block", "kv_injection")}      # (config.drafting, config.conditioning) it runs
    autoregressive = False                      # True: drafts one token per forward (variants only)
    fixed_shapes = True                         # runs on a fixed-shape cache (the paper's only)
    layer = DrafterLayer

    def __init__(self, config: DrafterConfig):
        super().__init__()
        if (config.drafting, config.conditioning) not in self.variants:
            raise ValueError(f"{type(self).__name__} does not run "
                             f"drafting={config.drafting.value!r}, "
                             f"conditioning={config.conditioning.value!r}; "
                             "build it with dflash_lite.decoding.variants.make_drafter")
        self.config = config
        self.fc = nn.Linear(config.num_context_features, config.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList(self.layer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config.rotary_config())
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def rope(self, positions: torch.Tensor,
             dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (N, T, D) of transformers' rotary embedding at ``positions`` (N, T): for rope
        types in :data:`STATIC_ROPE`, rows of a table computed once (the same numbers, a gather
        instead of a dozen ops per call); for the others, the embedding itself."""
        if self.rotary_emb.rope_type not in STATIC_ROPE:
            return self.rotary_emb(torch.empty(0, dtype=dtype, device=positions.device), positions)
        table = getattr(self, "_rope_table", None)
        if not torch.compiler.is_compiling():   # a compiled forward reads the table rope_table made
            needed = int(positions.max()) + 1 if positions.numel() else 1
            if table is None or table[0].shape[0] < needed or table[0].device != positions.device:
                table = self.rope_table(needed, positions.device)
        return table[0][positions].to(dtype), table[1][positions].to(dtype)

    def rope_table(self, needed: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """The cos/sin table of positions ``0 .. needed - 1`` (at least; a power of two from 256),
        made once and kept: :meth:`rope` reads its rows."""
        size = max(256, 1 << (needed - 1).bit_length())
        with torch.no_grad():
            cos, sin = self.rotary_emb(torch.empty(0, device=device),
                                       torch.arange(size, device=device)[None])
        self._rope_table = (cos[0], sin[0])                                     # (size, D), fp32
        return self._rope_table

    def project(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """Tapped target features (N, C, K*H) -> context (N, C, H)."""
        return self.hidden_norm(self.fc(target_hidden))

    def forward(self, block_embeds: torch.Tensor, target_hidden: torch.Tensor,
                block_positions: torch.Tensor, context_positions: torch.Tensor,
                cache: SlotCache | None = None,
                attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states of the block, final-normed. ``block_embeds``: (N, B, H) target embeddings
        of the block; ``target_hidden``: (N, C, K*H) tapped features of the *new* context positions
        (all of them when there is no cache); positions: (N, B) and (N, C) absolute positions;
        ``attn_mask`` (N, 1, B, C_total+B), boolean, only to train several blocks in one forward."""
        context = self.project(target_hidden)                              # (N, C, H)
        block_rope = self.rope(block_positions, block_embeds.dtype)        # cos, sin: (N, B, D)
        context_rope = self.rope(context_positions, context.dtype)         # (N, C, D)
        masks = {"full_attention": attn_mask}
        if "sliding_attention" in self.config.layer_types:
            keys = context_positions if cache is None else cache.key_positions(context.shape[1])
            keys = torch.cat([keys.to(block_positions.device), block_positions], dim=1)
            window = self.window_mask(block_positions, keys)
            masks["sliding_attention"] = window if attn_mask is None else window & attn_mask
        x = block_embeds
        for i, layer in enumerate(self.layers):
            x = layer(x, context, block_rope, context_rope, cache, i,
                      masks[self.config.layer_types[i]])
        return self.norm(x)                                                # (N, B, H)

    def window_mask(self, block_positions: torch.Tensor,
                    key_positions: torch.Tensor) -> torch.Tensor:
        """Sliding-window layers: block position q may see key position k iff |q - k| <=
        sliding_window. ``key_positions`` (N, K): context, then block. (N, 1, B, K), True: seen."""
        distance = (block_positions[:, :, None] - key_positions[:, None, :]).abs()     # (N, B, K)
        return (distance <= self.config.sliding_window)[:, None]

    @torch.inference_mode()
    def draft_logits(self, target, block_ids: torch.Tensor, target_hidden: torch.Tensor, start,
                     cache: SlotCache | None = None, block_start=None,
                     block_lengths=None) -> torch.Tensor:
        """:meth:`draft_forward` without autograd (for every caller outside a compiled region)."""
        return self.draft_forward(target, block_ids, target_hidden, start, cache, block_start,
                                  block_lengths)

    def draft_forward(self, target, block_ids: torch.Tensor, target_hidden: torch.Tensor, start,
                      cache: SlotCache | None = None, block_start=None,
                      block_lengths=None) -> torch.Tensor:
        """Logits for the B-1 masked positions of ``block_ids`` (N, B) -> (N, B-1, V).
        ``target_hidden``: the features of the new context positions ``start .. start+C-1``
        (``start``: an int, or (N,) on the device); with a cache they are written there, and the
        earlier context is read from it. The block's first token sits at ``block_start`` (default:
        right after the new context); a fixed-shape cache masks what lies past the context.
        ``block_lengths`` (N,): row r drafts as a block of its first ``block_lengths[r]`` would."""
        n, c, b = block_ids.shape[0], target_hidden.shape[1], block_ids.shape[1]
        block_start = start + c if block_start is None else block_start
        context_positions = _offsets(start, c, block_ids.device, n)                    # (N, C)
        block_positions = _offsets(block_start, b, block_ids.device, n)                # (N, B)
        mask = None
        if cache is not None:
            cache.rewind(start, block_start)
            mask = cache.context_mask(b, c, block_lengths)
        dtype = self.fc.weight.dtype                    # the drafter's; the target's may differ
        embeds = target.get_input_embeddings()(block_ids).to(dtype)                    # (N, B, H)
        hidden = self(embeds, target_hidden.to(dtype), block_positions, context_positions,
                      cache, mask)
        head = target.get_output_embeddings()
        # a row count of a multiple of 4 runs the head's product faster on CPU
        first = 0 if b % 4 == 0 else 1
        return head(hidden[:, first:].to(head.weight.dtype))[:, 1 - first:]


def _offsets(start, width: int, device, rows: int) -> torch.Tensor:
    """(rows, width) positions ``start + 0 .. width - 1``; ``start`` an int or a (rows,) tensor."""
    steps = torch.arange(width, device=device)
    if isinstance(start, torch.Tensor):
        return start.view(-1, 1) + steps
    return (steps + start)[None].expand(rows, -1)
