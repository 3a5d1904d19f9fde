"""What a DFlash drafter is, before any weight (docs/method.md#the-drafter): :class:`DrafterConfig`,
how it drafts (:class:`Drafting`), what it is conditioned on (:class:`Conditioning`), and whether
it fits a target (:func:`check_compatible`). The model is :mod:`dflash_lite.decoding.drafter`."""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field

from ..validate import check_choice
from .target import tapped_layer_ids


class Drafting(enum.StrEnum):           # str() is the value, as the command line and JSON write it
    """How a drafter proposes a block (paper sections 3 and 5). The paper's is ``BLOCK``."""
    BLOCK = "block"                     # DFlash: one forward drafts the whole block
    AUTOREGRESSIVE = "autoregressive"   # the EAGLE-style baseline (DFlash-AR): a token per forward
    DRAFT_MODEL = "draft-model"         # a small causal LM; trained, never a DrafterConfig


class Conditioning(enum.StrEnum):
    """How the target's features reach the drafter (paper section 3; notebook 04)."""
    KV_INJECTION = "kv_injection"       # the paper's: the projected features are every layer's K/V
    INPUT_FUSION = "input_fusion"       # the projected features enter once, as the context's input
    NONE = "none"                       # no target features; the context is the token embeddings


@dataclass
class DrafterConfig:
    """Shape of a DFlash drafter and the target it belongs to."""
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int                  # the target's: the drafter borrows its embedding and LM head
    mask_token_id: int
    num_target_layers: int
    target_layer_ids: list[int]
    num_layers: int = 5
    block_size: int = 16
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960
    max_block_size: int = 64          # largest block the drafter may be asked for at inference
    hidden_act: str = "silu"
    attention_bias: bool = False
    # which drafter this is (variants.make_drafter builds it); strings ("block", ...) are accepted
    drafting: Drafting = Drafting.BLOCK
    conditioning: Conditioning = Conditioning.KV_INJECTION
    # rope parameters beyond rope_theta, as a config.json writes them (None: plain RoPE)
    rope_scaling: dict | None = None
    # per layer "full_attention" or "sliding_attention" (None: all full, the paper's drafter)
    layer_types: list[str] | None = None
    sliding_window: int | None = None         # sliding layers see no key farther than this
    # keys of a public DFlash config.json that this code does not use, carried so that an
    # import -> export round trip writes them back unchanged (auto_map, initializer_range, ...)
    public_config: dict = field(default_factory=dict)
    num_context_features: int = field(init=False)

    def __post_init__(self):
        self.target_layer_ids = [int(i) for i in self.target_layer_ids]
        if not self.target_layer_ids:
            raise ValueError("target_layer_ids is empty")
        self.drafting = check_choice("drafting", self.drafting, Drafting,
                                     [Drafting.BLOCK, Drafting.AUTOREGRESSIVE])
        self.conditioning = check_choice("conditioning", self.conditioning, Conditioning)
        if self.conditioning == "none":
            self.target_layer_ids = [-1]
        elif min(self.target_layer_ids) < 0:
            raise ValueError(f"target_layer_ids must be >= 0, got {self.target_layer_ids}")
        if self.conditioning == "input_fusion" and self.drafting != "block":
            raise ValueError("input_fusion is implemented for block drafting only")
        self.num_context_features = len(self.target_layer_ids) * self.hidden_size
        if self.block_size < 1 or self.block_size > self.max_block_size:
            raise ValueError(f"block_size must be in 1..{self.max_block_size}, "
                             f"got {self.block_size}")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} is outside the vocabulary "
                             f"(size {self.vocab_size})")
        self.layer_types = list(self.layer_types or ["full_attention"] * self.num_layers)
        if len(self.layer_types) != self.num_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for "
                             f"{self.num_layers} layers")
        unknown = sorted(set(self.layer_types) - {"full_attention", "sliding_attention"})
        if unknown:
            raise ValueError(f"layer_types {unknown} are not supported "
                             "(full_attention, sliding_attention)")
        if "sliding_attention" in self.layer_types:
            if not isinstance(self.sliding_window, int) or self.sliding_window < 1:
                raise ValueError("sliding_attention layers need sliding_window >= 1, "
                                 f"got {self.sliding_window!r}")
            if self.drafting != "block" or self.conditioning != "kv_injection":
                raise ValueError("sliding_attention layers are implemented for the DFlash drafter "
                                 "(block drafting, kv_injection) only")
        from transformers.activations import ACT2FN
        if not isinstance(self.hidden_act, str) or self.hidden_act not in ACT2FN:
            raise ValueError(f"hidden_act {self.hidden_act!r} is not an activation transformers "
                             f"knows (e.g. silu, gelu, relu)")
        self.rotary_config()                      # an unsupported rope type fails here, in one line

    @property
    def rope_parameters(self) -> dict:
        """``rope_theta`` with ``rope_scaling``: the dict transformers' rotary embedding reads."""
        scaling = dict(self.rope_scaling or {})
        rope_type = scaling.pop("rope_type", None) or scaling.pop("type", None) or "default"
        scaling.pop("type", None)
        return {**scaling, "rope_type": rope_type, "rope_theta": self.rope_theta}

    @classmethod
    def from_target(cls, target_config, mask_token_id: int, num_layers: int = 5,
                    block_size: int = 16, num_taps: int = 5, **overrides) -> "DrafterConfig":
        """A drafter shaped like the target's layers (the paper's choice)."""
        layers = target_config.num_hidden_layers
        rope = dict(getattr(target_config, "rope_parameters", None) or {})
        theta = rope.pop("rope_theta", 10000.0)
        scaling = rope if rope.get("rope_type", rope.get("type", "default")) != "default" else None
        return cls(**dict(
            hidden_size=target_config.hidden_size,
            intermediate_size=target_config.intermediate_size,
            num_attention_heads=target_config.num_attention_heads,
            num_key_value_heads=target_config.num_key_value_heads,
            head_dim=(getattr(target_config, "head_dim", None)
                      or target_config.hidden_size // target_config.num_attention_heads),
            vocab_size=target_config.vocab_size, mask_token_id=mask_token_id,
            num_target_layers=layers, target_layer_ids=tapped_layer_ids(layers, num_taps),
            num_layers=num_layers, block_size=block_size, rms_norm_eps=target_config.rms_norm_eps,
            rope_theta=theta, rope_scaling=scaling,
            max_position_embeddings=target_config.max_position_embeddings) | overrides)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("num_context_features")
        return {**d, "drafting": self.drafting.value, "conditioning": self.conditioning.value}

    def rotary_config(self):
        """A Qwen3Config of only what transformers' rotary embedding reads (theta and scaling)."""
        from transformers import Qwen3Config
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        rope = self.rope_parameters
        if rope["rope_type"] != "default" and rope["rope_type"] not in ROPE_INIT_FUNCTIONS:
            raise ValueError(f"rope type {rope['rope_type']!r} is not supported "
                             f"(default, {', '.join(ROPE_INIT_FUNCTIONS)})")
        if rope.get("partial_rotary_factor", 1.0) != 1.0:
            raise ValueError("partial rotary embeddings (partial_rotary_factor) are not supported "
                             "by this drafter")
        try:
            return Qwen3Config(hidden_size=self.hidden_size, head_dim=self.head_dim,
                               num_attention_heads=self.num_attention_heads, rope_parameters=rope,
                               max_position_embeddings=self.max_position_embeddings)
        except Exception as e:            # transformers validates the parameters of each rope type
            raise ValueError(f"rope parameters {rope} are not valid "
                             f"({str(e).splitlines()[0]})") from None


def check_compatible(config: DrafterConfig, target_config,
                     mask_token_id: int | None = None) -> None:
    """One clear error when a drafter cannot run against a target."""
    if config.hidden_size != target_config.hidden_size:
        raise ValueError(f"drafter hidden size {config.hidden_size} != target hidden size "
                         f"{target_config.hidden_size}")
    if config.vocab_size != target_config.vocab_size:
        raise ValueError(f"drafter vocabulary {config.vocab_size} != target vocabulary "
                         f"{target_config.vocab_size}")
    depth = target_config.num_hidden_layers
    if max(config.target_layer_ids) >= depth \
            or min(config.target_layer_ids) < (-1 if config.conditioning == "none" else 0):
        raise ValueError(f"drafter taps layers {config.target_layer_ids}, "
                         f"but the target has {depth} layers")
    if mask_token_id is not None and mask_token_id != config.mask_token_id:
        raise ValueError(f"drafter mask token {config.mask_token_id} "
                         f"!= the tokenizer's {mask_token_id}")
