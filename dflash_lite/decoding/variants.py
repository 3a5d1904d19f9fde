"""The drafter's ablations, each a subclass that changes one thing, kept out of
:mod:`dflash_lite.decoding.drafter` so that the paper's drafter reads as the paper describes it;
notebooks 03 and 04 and ``tools/train_ablations.py`` compare them (docs/method.md#the-drafter).
:func:`make_drafter` builds whichever a config names."""
from __future__ import annotations

import torch

from .drafter import DFlashDrafter, DrafterConfig, DrafterLayer, KVInjectionAttention


class InputFusionAttention(KVInjectionAttention):
    def forward(self, block, context, block_rope, context_rope, cache, layer, attn_mask=None,
                context_queries=False):
        """The block's output, and the context's own (causal over the context, never the block)
        when ``context_queries``: the context is a residual stream updated layer by layer."""
        k, v = self.keys_values(block, context, block_rope, context_rope, cache, layer)  # [C ; B]
        out = self.attend(block, block_rope, k, v, attn_mask)
        if not context_queries:
            return out, None
        b, c = block.shape[1], context.shape[1]
        k_ctx, v_ctx = k[:, :, :-b], v[:, :, :-b]                        # all context, cached + new
        total = k_ctx.shape[2]
        causal = (torch.arange(total, device=k.device)[None]
                  <= torch.arange(total - c, total, device=k.device)[:, None])
        return out, self.attend(context, context_rope, k_ctx, v_ctx, causal)   # (N, C, H)


class InputFusionLayer(DrafterLayer):
    attention = InputFusionAttention

    def forward(self, x, context, block_rope, context_rope, cache, layer, attn_mask=None,
                last=False):
        """The block's and the context's residual streams (the last layer leaves the context)."""
        a, a_ctx = self.self_attn(self.input_layernorm(x), self.input_layernorm(context),
                                  block_rope, context_rope,
                                  cache, layer, attn_mask, context_queries=not last)
        x = x + a
        if a_ctx is not None:
            context = context + a_ctx
            context = context + self.mlp(self.post_attention_layernorm(context))
        return x + self.mlp(self.post_attention_layernorm(x)), context


class InputFusionDrafter(DFlashDrafter):
    """``conditioning="input_fusion"``: the projected features enter once, as the context's input,
    and run through the drafter's layers (causal) like a small LM's prompt."""
    variants = {("block", "input_fusion")}
    fixed_shapes = False
    layer = InputFusionLayer

    def forward(self, block_embeds, target_hidden, block_positions, context_positions, cache=None,
                attn_mask=None):
        context = self.project(target_hidden)                              # (N, C, H)
        block_rope = self.rope(block_positions, block_embeds.dtype)
        context_rope = self.rope(context_positions, context.dtype)
        x = block_embeds
        for i, layer in enumerate(self.layers):
            x, context = layer(x, context, block_rope, context_rope, cache, i, attn_mask,
                               last=i == len(self.layers) - 1)
        return self.norm(x)


class NoFeatureDrafter(DFlashDrafter):
    """``conditioning="none"``: DFlash's attention, the target's token embeddings as its context
    (the config taps layer -1, the embedding output)."""
    variants = {("block", "none")}


class AutoregressiveAttention(KVInjectionAttention):
    def keys_values(self, block, context, block_rope, context_rope, cache, layer):
        """As KV injection, but the drafted token's K/V join the cache: the next draft sees it."""
        k, v = super().keys_values(block, context, block_rope, context_rope, cache, layer)
        if cache is not None:                   # cache = [context ; drafts so far]: add this token
            b = block.shape[1]
            k, v = cache.append(layer, k[:, :, -b:], v[:, :, -b:])
        return k, v


class AutoregressiveLayer(DrafterLayer):
    attention = AutoregressiveAttention


class AutoregressiveDrafter(DFlashDrafter):
    """``drafting="autoregressive"``: the EAGLE-style baseline (the paper's DFlash-AR), a token per
    forward, trained causally over the block (:mod:`dflash_lite.training.train`)."""
    variants = {("autoregressive", "kv_injection"), ("autoregressive", "none")}
    autoregressive = True
    fixed_shapes = False
    layer = AutoregressiveLayer

    @torch.inference_mode()
    def next_token_logits(self, target, token: torch.Tensor, target_hidden: torch.Tensor,
                          context_start: int, position: int, cache) -> torch.Tensor:
        """One drafting step: ``token`` (1, 1) at ``position`` -> logits of the next token (1, V).
        ``target_hidden``: the new context positions' features from ``context_start`` (or none)."""
        device, c, dtype = token.device, target_hidden.shape[1], self.fc.weight.dtype
        context_positions = torch.arange(context_start, context_start + c, device=device)[None]
        embeds = target.get_input_embeddings()(token).to(dtype)                        # (1, 1, H)
        hidden = self(embeds, target_hidden.to(dtype), torch.tensor([[position]], device=device),
                      context_positions, cache)
        head = target.get_output_embeddings()
        return head(hidden[:, -1].to(head.weight.dtype))                               # (1, V)


VARIANTS = (DFlashDrafter, InputFusionDrafter, NoFeatureDrafter, AutoregressiveDrafter)


def make_drafter(config: DrafterConfig) -> DFlashDrafter:
    """The drafter a config's ``drafting`` and ``conditioning`` name (a checkpoint keeps both, so a
    saved drafter loads as what it was)."""
    key = (config.drafting, config.conditioning)
    for cls in VARIANTS:
        if key in cls.variants:
            return cls(config)
    raise ValueError(f"no drafter runs drafting={config.drafting.value!r} with "
                     f"conditioning={config.conditioning.value!r}")
