# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · The block-diffusion drafter
#
# An autoregressive drafter pays one forward per draft token. DFlash drafts a whole block in **one**
# forward: the block is `[last accepted token, <|mask|>, ..., <|mask|>]`, attention is bidirectional
# inside the block, and every layer also attends to the target's hidden states at all accepted
# positions (KV injection). The B-1 masked positions are filled at once by the target's own LM head.
#
# **In this chapter you will**
#
# * **build the drafter's forward yourself**: the masked [block](../docs/glossary.md#block-size),
#   RoPE, the [KV-injection](../docs/glossary.md#kv-injection) attention, a whole drafter layer and
#   the training [block mask](../docs/glossary.md#block-mask), each checked against the package's
#   (`dflash_lite/decoding/drafter.py`; the mask, `dflash_lite/training/data.py`);
# * see where "diffusion" comes from (masked, absorbing-state diffusion) and why DFlash denoises in
#   a single step;
# * compare one forward for B-1 tokens with the B-1 forwards of an
#   [EAGLE](../docs/glossary.md#eagle)-style drafter (one that also reads the target's hidden
#   states but guesses one token per forward, autoregressively);
# * measure what the drafter gets right at each block position, per domain, and whether re-feeding
#   the draft for a second or third denoising pass pays.
#
# **Prerequisites:** chapter 02.
#
# **Run time and hardware:** the next cell prints the hardware this run uses, and the cell
# before the Summary prints how long the chapter took at its parameters. Terms link to the
# [glossary](../docs/glossary.md) at first use.

# %%
import json, math, statistics, time
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np
import torch
import torch.nn.functional as F

from dflash_lite import corpus, generate_autoregressive, load_pretrained, stop_token_ids
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.decode import DFlashProposer, PerRow, generate
from dflash_lite.decoding.baselines import EagleProposer
from dflash_lite.decoding.target import SHIPPED_BASELINES, SHIPPED_DRAFTERS, context_features
from dflash_lite.training.data import block_attention_mask
from dflash_lite.measuring.plotting import save_figure, subplots
from dflash_lite.decoding.timing import interleaved

from dflash_lite.course import chapter_clock

_ = torch.manual_seed(0)
clock = chapter_clock()                  # prints the hardware; clock.report() near the end

# %% tags=["parameters"]
# Parameters
target_name = "tiny"
drafter_path = str(SHIPPED_DRAFTERS["tiny"])
eagle_path = str(SHIPPED_BASELINES["tiny"]["eagle"])
device = "cpu"
block_size = 16
num_prompts = 4
max_new_tokens = 64
timing_repeats = 20
passes = [1, 2, 3]

# %%
device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
target, tokenizer = load_pretrained(target_name, device=device)
drafter = load_drafter(drafter_path).to(device).eval()
eagle = load_drafter(eagle_path).to(device).eval()
stops = stop_token_ids(target, tokenizer)
c = drafter.config
print(f"drafter: {c.num_layers} layers, block {c.block_size}, taps target layers "
      f"{c.target_layer_ids} of {c.num_target_layers}, "
      f"mask token {tokenizer.convert_ids_to_tokens(c.mask_token_id)!r}, "
      f"{sum(p.numel() for p in drafter.parameters()) / 1e6:.2f}M trainable parameters "
      "(no embedding, no LM head)")
print(f"EAGLE-style baseline: {eagle.config.num_layers} layers, block {eagle.config.block_size}, "
      f"taps {eagle.config.target_layer_ids}, drafting {eagle.config.drafting.value!r}")
print(f"heads: {c.num_attention_heads} query, {c.num_key_value_heads} key/value, head_dim "
      f"{c.head_dim}; "
      f"hidden {c.hidden_size}; RoPE theta {c.rope_theta:g}")
assert c.drafting == "block" and eagle.config.drafting == "autoregressive"

# %% [markdown]
# ## 1. Build it: one drafter forward, from scratch
#
# We write the forward in five small steps, each checked against the package, then use the package.
# The setting is the start of a DFlash generation: the target has read a prompt (its *context*), and
# its greedy next token is the last accepted token.
#
# ### 1a. The context features
#
# The target runs once over the prompt with `output_hidden_states=True`. The drafter taps K of its
# layers (index `layer + 1`, since index 0 is the embedding output), concatenates them per position
# (K*H wide) and projects them to H with one linear layer `fc` and an RMSNorm `hidden_norm`.

# %% nbgrader={"grade": false, "grade_id": "ch03_build_context", "locked": false, "schema_version": 3, "solution": true, "task": false}
prompt = corpus.math_problem(corpus.HELD_OUT_SEED + 123).prompt
ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)           # (1, C)
with torch.inference_mode():
    out = target(ids, output_hidden_states=True)
# (1, 1) the target's next token
last = out.logits[:, -1:].argmax(-1)
C, H, eps = ids.shape[1], c.hidden_size, c.rms_norm_eps
# the package's (dflash_lite/decoding/target.py)
features = context_features(out.hidden_states, c.target_layer_ids)

### BEGIN SOLUTION
# (1, C, K*H)
my_features = torch.cat([out.hidden_states[layer + 1] for layer in c.target_layer_ids], dim=-1)
### END SOLUTION


def rms_norm(x, weight):
    """x / rms(x) * weight, over the last dimension (Qwen3's RMSNorm)."""
    ### BEGIN SOLUTION
    return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    ### END SOLUTION


with torch.inference_mode():
    ### BEGIN SOLUTION
    context = rms_norm(features @ drafter.fc.weight.T, drafter.hidden_norm.weight)   # (1, C, H)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ch03_build_context_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
assert torch.equal(my_features, features)
torch.testing.assert_close(context, drafter.project(features))
print(f"prompt: {C} tokens; features {tuple(features.shape)} -> context {tuple(context.shape)}")

# %% [markdown]
# ### 1b. The masked block
#
# Slot 0 holds the last accepted token (here the target's first greedy token); slots 1..B-1 hold the
# mask token. The block is embedded with the **target's** frozen embedding: the drafter has none.

# %%
B = block_size
block = torch.full((1, B), c.mask_token_id, device=device)                  # (1, B)
block[0, 0] = last[0, 0]
print("block:", tokenizer.convert_ids_to_tokens(block[0].tolist())[:4], "...")
with torch.inference_mode():
    block_embeds = target.get_input_embeddings()(block)                     # (1, B, H)
assert block[0, 0] != c.mask_token_id and (block[0, 1:] == c.mask_token_id).all()

# %% [markdown]
# ### 1c. RoPE at absolute positions
#
# The context sits at positions `0..C-1`, the block right after it at `C..C+B-1`. Rotary embeddings
# rotate each pair of dimensions of a query or key by an angle proportional to its position, so the
# score between a query and a key depends on how far apart they are.

# %% nbgrader={"grade": false, "grade_id": "ch03_build_rope", "locked": false, "schema_version": 3, "solution": true, "task": false}
def rope_cos_sin(positions):
    """cos, sin of shape (T, D) for integer positions (T,)."""
    ### BEGIN SOLUTION
    exponents = torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim
    inv_freq = 1.0 / c.rope_theta ** exponents
    angles = positions[:, None].float() * inv_freq[None, :]                  # (T, D/2)
    angles = torch.cat([angles, angles], dim=-1)                             # (T, D)
    return angles.cos().to(device), angles.sin().to(device)
    ### END SOLUTION


def rotate(x, cos, sin):
    """Apply RoPE to (1, heads, T, D)."""
    ### BEGIN SOLUTION
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ch03_build_rope_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
ctx_pos, block_pos = torch.arange(C), torch.arange(C, C + B)
cos, sin = rope_cos_sin(block_pos)
ref_cos, ref_sin = drafter.rotary_emb(block_embeds, block_pos[None].to(device))   # (1, B, D) each
torch.testing.assert_close(cos, ref_cos[0])
torch.testing.assert_close(sin, ref_sin[0])
from dflash_lite.exercises import score                      # more positions, and rotate itself
from dflash_lite.exercises.ch03 import check_rope
score(check_rope(rope_cos_sin, rotate, drafter), 1)

# %% [markdown]
# ### 1d. KV-injection attention
#
# This is the heart of DFlash. In every drafter layer:
#
# * **queries** come from the block only (B rows);
# * **keys and values** come from `[projected context ; block]` (C+B rows). The context here is the
#   same projected feature tensor in every layer: it is *injected*, not transformed layer by layer;
# * q and k get an RMSNorm per head (q/k-norm), then RoPE at their absolute positions;
# * there is **no causal mask**: every block query sees all of the context and the whole block.
#
# The tiny target has fewer key/value heads than query heads (grouped-query attention), so each K/V
# head is shared by a group of query heads. The optional `mask` is for training (section 1f).

# %% [markdown]
# The whole data path first, drawn (`dflash_lite/measuring/diagrams.py`). What to look for: the context is
# projected **once** and reaches every drafter layer as keys and values, while the queries come
# only from the block.

# %%
from dflash_lite.measuring import diagrams
_ = save_figure(diagrams.kv_injection(c.num_target_layers, tuple(c.target_layer_ids), c.num_layers),
                "03_diagram_kv_injection")

# %% nbgrader={"grade": false, "grade_id": "ch03_build_kv_injection", "locked": false, "schema_version": 3, "solution": true, "task": false}
def kv_injection_attention(attn, x, context, x_pos, ctx_pos, mask=None):
    """attn: a drafter layer's self_attn (for its weights). x: (1, Q, H) normed block states at
    positions x_pos (Q,); context: (1, C, H) at ctx_pos (C,). mask: (Q, C+Q) bool, True = may
    attend."""
    ### BEGIN SOLUTION
    nh, nkv, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    # (1, T, n*D) -> (1, n, T, D)
    heads = lambda t, n: t.view(1, t.shape[1], n, d).transpose(1, 2)
    kv_in = torch.cat([context, x], dim=1)                                   # (1, C+Q, H)
    kv_pos = torch.cat([ctx_pos, x_pos])
    # (1, nh, Q, D)
    q = rotate(rms_norm(heads(attn.q_proj(x), nh), attn.q_norm.weight), *rope_cos_sin(x_pos))
    # (1, nkv, C+Q, D)
    k = rotate(rms_norm(heads(attn.k_proj(kv_in), nkv), attn.k_norm.weight), *rope_cos_sin(kv_pos))
    v = heads(attn.v_proj(kv_in), nkv)                                       # (1, nkv, C+Q, D)
    # GQA: share K/V heads
    k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)                          # (1, nh, Q, C+Q)
    if mask is not None:
        scores = scores.masked_fill(~mask.to(scores.device), float("-inf"))
    out = scores.softmax(dim=-1) @ v                                         # (1, nh, Q, D)
    return attn.o_proj(out.transpose(1, 2).reshape(1, x.shape[1], nh * d))  # (1, Q, H)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ch03_build_kv_injection_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
layer0 = drafter.layers[0]
with torch.inference_mode():
    x = rms_norm(block_embeds, layer0.input_layernorm.weight)
    mine = kv_injection_attention(layer0.self_attn, x, context, block_pos, ctx_pos)
    rope_b = drafter.rotary_emb(x, block_pos[None].to(device))
    rope_c = drafter.rotary_emb(context, ctx_pos[None].to(device))
    # dflash_lite/decoding/drafter.py
    ref = layer0.self_attn(x, context, rope_b, rope_c, cache=None, layer=0)
torch.testing.assert_close(mine, ref)
print(f"layer 0 attention output {tuple(mine.shape)}: max |mine - package| = "
      f"{(mine - ref).abs().max():.2e}")

# %% [markdown]
# ### 1e. The whole drafter
#
# A drafter layer is a Qwen3 layer with that attention: pre-norm, attention, residual, pre-norm,
# SwiGLU MLP, residual. After the last layer a final RMSNorm and the **target's** LM head; the logits
# of slots 1..B-1 are the draft. We compare with the package's `draft_logits`, and our argmax with
# the draft that the decode loop's `DFlashProposer` makes for the same context.

# %% nbgrader={"grade": false, "grade_id": "ch03_build_drafter_forward", "locked": false, "schema_version": 3, "solution": true, "task": false}
def my_draft_logits(block_ids, features, block_pos, ctx_pos, mask=None):
    """The drafter forward from scratch: (1, Q) block tokens -> (1, Q, V) logits (all slots)."""
    ### BEGIN SOLUTION
    context = rms_norm(features @ drafter.fc.weight.T, drafter.hidden_norm.weight)   # (1, C, H)
    x = target.get_input_embeddings()(block_ids)                                     # (1, Q, H)
    for layer in drafter.layers:
        x = x + kv_injection_attention(layer.self_attn, rms_norm(x, layer.input_layernorm.weight),
                                       context, block_pos, ctx_pos, mask)
        h = rms_norm(x, layer.post_attention_layernorm.weight)
        # SwiGLU
        x = x + layer.mlp.down_proj(F.silu(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h))
    return target.get_output_embeddings()(rms_norm(x, drafter.norm.weight))          # (1, Q, V)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ch03_build_drafter_forward_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with torch.inference_mode():
    mine = my_draft_logits(block, features, block_pos, ctx_pos)[:, 1:]               # (1, B-1, V)
    ref = drafter.draft_logits(target, block, features, start=0)                     # (1, B-1, V)
torch.testing.assert_close(mine, ref)
proposer = DFlashProposer(drafter, target, block_size)
proposer.start(ids, features)
draft = proposer.propose(last[0], [block_size - 1])[0].tokens       # one row's chain of B-1 drafts
assert torch.equal(mine[0].argmax(-1), draft)
print(f"draft logits {tuple(mine.shape)}: max |mine - package| = {(mine - ref).abs().max():.2e}")
print("prompt ends:", repr(prompt[-60:]))
print("draft:      ", repr(tokenizer.decode([last[0, 0].item()] + draft.tolist())))

# %% [markdown]
# ### 1f. The training mask: many blocks in one forward
#
# In training, one sequence holds many blocks, one per anchor *a*. All of them run in one forward,
# queries = every block's slots, keys = `[context of all T positions ; every block]`. The mask makes
# each block behave as if it ran alone at inference: block *j* sees the context **strictly before its
# anchor** (the target's features at *a* and after already encode the tokens it must predict) and
# itself in both directions, never another block.

# %% nbgrader={"grade": false, "grade_id": "ch03_build_block_mask", "locked": false, "schema_version": 3, "solution": true, "task": false}
def my_block_mask(anchors, T, B):
    """(A*B, T + A*B) bool: which key each block query may attend to."""
    ### BEGIN SOLUTION
    A = len(anchors)
    mask = torch.zeros(A * B, T + A * B, dtype=torch.bool)
    for j, a in enumerate(anchors.tolist()):
        rows = slice(j * B, (j + 1) * B)
        mask[rows, :a] = True                                   # context strictly before the anchor
        mask[rows, T + j * B: T + (j + 1) * B] = True           # its own block, in both directions
    return mask
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ch03_build_block_mask_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
anchors = torch.tensor([3, 6, 9])
mask = my_block_mask(anchors, 12, 4)
# defined in dflash_lite/training/data.py
assert torch.equal(mask, block_attention_mask(anchors, 12, 4))
fig, ax = plt.subplots(figsize=(7, 3))
ax.imshow(mask.int(), cmap="Greys", aspect="auto")
ax.axvline(11.5, color="red", lw=1)
ax.set_xlabel("keys: context positions 0-11 | block tokens of 3 blocks")
ax.set_ylabel("queries: 3 blocks x 4")
ax.set_title("Training attention mask (black = may attend)")
_ = save_figure(fig, "03_block_attention_mask")
from dflash_lite.exercises import score                      # more anchors, lengths and block sizes
from dflash_lite.exercises.ch03 import check_block_mask
score(check_block_mask(my_block_mask), 2)

# %% [markdown]
# The claim "each block behaves as if it ran alone" is testable. Take three anchors inside our prompt,
# run all three blocks in **one** masked forward, and compare each block with a separate inference
# forward that is given only the context before its anchor. They must agree. The masked forward is
# your `my_draft_logits` with your `my_block_mask`; while either is blank, the cell says so and
# uses the package's.

# %%
from dflash_lite.exercises import yours_or_ours                # the package's while yours is blank
from dflash_lite.exercises.ch03 import package_draft_logits
masked_forward = yours_or_ours("my_draft_logits", my_draft_logits,
                               package_draft_logits(drafter, target), "DFlashDrafter forward")
training_mask = yours_or_ours("my_block_mask", my_block_mask, block_attention_mask)

anchors = torch.tensor([C // 4, C // 2, C - 2])
blocks = torch.full((1, len(anchors) * B), c.mask_token_id, device=device)
# [x_a, MASK x (B-1)] per anchor
blocks[0, ::B] = ids[0, anchors]
# block j sits at a_j .. a_j+B-1
positions = (anchors[:, None] + torch.arange(B)[None]).flatten()
with torch.inference_mode():
    together = masked_forward(blocks, features, positions, torch.arange(C),
                              training_mask(anchors, C, B))
    for j, a in enumerate(anchors.tolist()):
        alone = drafter.draft_logits(target, blocks[:, j * B:(j + 1) * B], features[:, :a], start=0)
        torch.testing.assert_close(together[:, j * B + 1:(j + 1) * B], alone, rtol=1e-4, atol=1e-4)
print(f"{len(anchors)} blocks at anchors {anchors.tolist()}: one masked forward == {len(anchors)} "
      f"separate forwards")

# %% [markdown]
# From here on we use the package: `DFlashDrafter.draft_logits` for a block, `DFlashProposer` in the
# decode loop (`dflash_lite/decoding/decode.py`), `block_attention_mask` in training (`dflash_lite/training/data.py`).
#
# ## 2. Why "diffusion", and why one step
#
# **Masked (absorbing-state) diffusion** is the discrete cousin of image diffusion. The *forward
# process* corrupts a text by replacing each token with an absorbing `MASK` state with probability
# *t*, from *t* = 0 (clean) to *t* = 1 (all masked); once masked, a token stays masked. The model
# learns the *reverse*: given a partly masked text, predict the original token at every masked slot,
# with a cross-entropy on those slots. Generating means starting from all masks and unmasking over
# several steps, keeping some predictions each time and predicting the rest again with them in view
# (MDLM, LLaDA). **Block diffusion** does this one block at a time, each block conditioned on the
# blocks before it.
#
# The cell below runs the forward process on a response of the target.

# %%
response = generate_autoregressive(target, ids, 24, stop_token_ids=stops).tokens
g = torch.Generator().manual_seed(0)
for t in (0.0, 0.25, 0.5, 1.0):
    keep = torch.rand(len(response), generator=g) >= t
    noisy = [tok if k else c.mask_token_id for tok, k in zip(response, keep.tolist())]
    print(f"t = {t:<4}: {tokenizer.decode(noisy).replace('<|mask|>', '_')!r}")

# %% [markdown]
# A DFlash drafter is a block-diffusion model used at a single noise level: *t* = 1 for slots
# 1..B-1, with slot 0 (the last accepted token) clean, and it **denoises in one step**: the argmax at
# every slot at once. Three reasons make one step enough:
#
# 1. **The block is nearly determined.** The drafter conditions on the target's own hidden states,
#    which already encode much of what the target will write next. A generic diffusion LM must
#    resolve real uncertainty between slots (two plausible continuations can mix into an incoherent
#    one when sampled independently); here most of that uncertainty is gone.
# 2. **Verification forgives mistakes.** A wrong token only ends the accepted prefix; the output is
#    still exactly the target's. Refining a draft buys at most a longer prefix.
# 3. **Latency.** Every denoising step is another drafter forward on the critical path of every
#    decode step. Section 5 measures whether a second pass pays.
#
# ## 3. One forward for the block against one forward per token
#
# Same context, same conditioning. The DFlash drafter fills B-1 positions in one forward; the
# EAGLE-style drafter (same layers, same taps, autoregressive) needs B-1 forwards.

# %%
def time_dflash():
    p = DFlashProposer(drafter, target, block_size); p.start(ids, features)
    t0 = time.perf_counter(); p.propose(last[0], [block_size - 1]); return time.perf_counter() - t0

def time_eagle():
    p = EagleProposer(eagle, target, block_size); p.start(ids, features)
    t0 = time.perf_counter(); p.propose(last[0, 0], block_size - 1); return time.perf_counter() - t0

# the one interleaved timer (dflash_lite/decoding/timing.py): a warm-up, then the two in turn;
# each run returns the seconds of its draft alone (the proposer's start is not timed)
timed = interleaved({"DFlash": time_dflash, "EAGLE-style": time_eagle}, repeats=timing_repeats,
                    warmup=1, device=device)
t_dflash, t_eagle = (statistics.median(r for _, r in timed[name])
                     for name in ("DFlash", "EAGLE-style"))
print(f"draft {block_size - 1} tokens: DFlash {t_dflash * 1e3:.2f} ms (1 forward), "
      f"EAGLE-style {t_eagle * 1e3:.2f} ms ({block_size - 1} forwards): {t_eagle / t_dflash:.1f}x")

# %% [markdown]
# ## 4. What the drafter gets right at each block position
#
# A draft at block position *j* only counts if positions 1..j-1 were accepted too. From the
# acceptance lengths of real greedy runs we get the share of steps that reached each position. Math
# and code are kept apart: they differ a lot, and a pooled mean hides it (how much each domain weighs
# in a pool depends on how many steps it took).

# %%
n_math = num_prompts // 2
math_prompts = [p.prompt for p in corpus.math_problems(n_math, split="held_out", start=4000)]
code_prompts = corpus.function_headers(corpus.stdlib_files("held_out"), num_prompts - n_math,
                                       seed=31)
prompt_ids = {domain: [tokenizer(p, return_tensors="pt").input_ids.to(device) for p in ps]
              for domain, ps in (("math", math_prompts), ("code", code_prompts))}
makers = {"DFlash": lambda: DFlashProposer(drafter, target, block_size),
          # drafts one request
          "EAGLE-style": lambda: PerRow(EagleProposer(eagle, target, block_size))}
lengths = {(name, domain): [] for name in makers for domain in prompt_ids}
for domain, xs in prompt_ids.items():
    for x in xs:
        expected = generate_autoregressive(target, x, max_new_tokens, stop_token_ids=stops).tokens
        for name, make in makers.items():
            r = generate(target, make(), x, max_new_tokens, stop_token_ids=stops)
            # lossless, token for token
            assert r.tokens == expected
            lengths[name, domain] += r.acceptance_lengths
fig, axes = subplots(1, len(prompt_ids), height=3.6, sharey=True)
for ax, domain in zip(np.atleast_1d(axes), prompt_ids):
    for name in makers:
        ls = lengths[name, domain]
        reach = [np.mean([a > j for a in ls]) for j in range(1, block_size)]
        ax.plot(range(1, block_size), reach, marker="o", label=f"{name} (tau {np.mean(ls):.2f})")
        shown = ", ".join(f"{j}: {reach[j - 1]:.2f}" for j in (1, 2, 4, 8, 15) if j < block_size)
        print(f"{domain:<5} {name:<12} tau {np.mean(ls):.2f} over {len(ls):>3} steps; "
              f"share of steps with draft j accepted: {shown}")
    ax.set_xlabel("block position j"); ax.set_title(f"{domain} (held-out)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, 1.25); ax.legend(loc="upper right")
np.atleast_1d(axes)[0].set_ylabel("share of steps with draft j accepted")
fig.suptitle("Acceptance by block position")
save_figure(fig, "03_acceptance_by_position")
pooled = {name: np.mean([a for d in prompt_ids for a in lengths[name, d]]) for name in makers}
print("pooled over both domains (misleading): "
      "" + ", ".join(f"{n} tau {t:.2f}" for n, t in pooled.items()))
for domain in prompt_ids:
    print(f"higher tau on {domain}: {max(makers, key=lambda n: np.mean(lengths[n, domain]))}")
for name, path in (("DFlash", drafter_path), ("EAGLE-style", eagle_path)):
    training = json.loads((Path(path) / "training_curve.json").read_text())["training"]
    print(f"{name} drafter trained on {training['num_math']} math and {training['num_code']} code "
          f"prompts, {training['steps']} steps")

# %% [markdown]
# What to look for:
#
# * **Math vs code.** The shipped drafters were trained on generated math problems and on stdlib
#   code (the last lines print the mix, from each drafter's `training_curve.json`). The math
#   problems are very regular, so on math acceptance reaches deep into the block. Code from
#   held-out stdlib files is far harder to predict for a model this small: both drafters rarely get
#   past the first positions.
# * **Why the pooled tau misleads.** A pooled mean weighs each domain by its number of steps, and a
#   domain with short acceptance takes many more steps for the same tokens, so code dominates the
#   pool. Compare the two drafters within a domain.
# * **DFlash vs EAGLE-style within a domain.** Where the EAGLE-style drafter has the higher tau
#   (printed per domain), that is not an artefact of pooling. Our EAGLE-style drafter is not EAGLE-3
#   (a one-layer drafter verified with a draft tree, the paper's baseline in Table 1). It is the same
#   drafter architecture (printed at the top) with the same conditioning, trained on the same data
#   for the same number of steps (`training_curve.json` in each drafter's folder), drafting one
#   token at a time, so every draft token sees the drafts before it. That makes each step's
#   proposal stronger, at the price of B-1 drafter forwards (section 3). DFlash predicts all slots at once from masks,
#   and a drafter this small and this briefly trained has not learned to make its slots agree with
#   each other (the independence problem of section 2). The paper's drafters, far larger and
#   trained far longer, beat EAGLE-3 on tau; this toy does not show that. What DFlash buys is the
#   cheaper draft: section 3 timed one draft of each, and notebook 06 times whole runs of both
#   on the same prompts.
# * **The curve decays with the position.** That is why the training loss weights early positions
#   most (`exp(-(k-1)/gamma)`, notebook 05).
#
# ## 5. Multi-step denoising: does a second pass pay?
#
# The source article describes a multi-step, DDPM-style denoising loop. DFlash drafts in **one**
# pass from masks. A fair experiment in the spirit of section 2: after the first pass, feed the
# drafted tokens back in place of the masks and run the drafter again (`DFlashProposer(...,
# passes=n)`). Each pass costs one more drafter forward; it pays only if tau rises by more than the
# extra cost.

# %%
all_prompts = [(domain, x) for domain, xs in prompt_ids.items() for x in xs]


def run_passes(n_passes):
    return [(domain, generate(target, DFlashProposer(drafter, target, block_size, passes=n_passes),
                              x, max_new_tokens, stop_token_ids=stops))
            for domain, x in all_prompts]


# the one interleaved timer (dflash_lite/decoding/timing.py): a warm-up, then every pass count
# in turn
timed = interleaved({n: (lambda n=n: run_passes(n)) for n in passes}, repeats=3, warmup=1,
                    device=device)
rows = []
for n_passes, rounds in timed.items():
    results = rounds[0][1]
    taus = {d: float(np.mean([a for d_, r in results if d_ == d for a in r.acceptance_lengths]))
            for d in prompt_ids}
    rate = statistics.median(sum(len(r.tokens) for _, r in out) / seconds
                             for seconds, out in rounds)
    rows.append((n_passes, taus, rate))
    print(f"passes {n_passes}: tau " + ", ".join(f"{d} {t:.2f}" for d, t in taus.items())
          + f"; {rate:.1f} tokens/s (median of {len(rounds)} interleaved rounds)")
best = max(rows, key=lambda r: r[2])
print(f"fastest: {best[0]} pass(es)")
falling = all(b[2] < a[2] for a, b in zip(rows, rows[1:]))
print(f"tokens/s {'falls' if falling else 'does not fall'} with every extra pass")

# %%
clock.report()                            # run time at this run's parameters, and the hardware

# %% [markdown]
# The drafter was trained for exactly one pass from masks (one noise level, *t* = 1), so a block
# full of its own guesses is an input it never saw in training. Compare each row's tau with the
# first row's: with the shipped drafter, do re-fed drafts raise tau on math? Every pass adds a
# drafter forward, so a pass that does not raise tau costs speed; the comparison's last lines print
# the fastest pass count and whether tokens/s fell with each extra pass. This is not MDLM-style
# unmasking (keep the confident slots, re-mask the rest, which stays closer to what the drafter saw
# in training): exercise 5 builds that and measures it. One pass is the method, as the paper says.
#
# ## Summary
#
# * A DFlash step drafts B-1 tokens with one drafter forward. Queries come from the block
#   `[last, MASK x (B-1)]`; keys and values from `[projected target features ; block]` in every
#   layer, with no causal mask. You built it and matched the package.
# * Training runs many blocks in one forward; the block mask makes each behave as if it ran alone.
# * DFlash is a block-diffusion model denoising in one step, because the target's features make the
#   block nearly determined, verification forgives mistakes, and every extra step costs latency.
# * Acceptance decays with the block position and differs a lot between domains: compare methods
#   within a domain.
#
# ## Review questions
#
# 1. What are the B tokens of the block the drafter receives at inference, and which of them get a draft?
# 2. In KV injection, where do the queries come from, and where do the keys and values come from?
# 3. Why does the drafter need no embedding table and no LM head of its own?
# 4. Why is there no causal mask inside a block?
# 5. In training, which context positions may block *j* with anchor *a* attend to, and why not position *a* itself?
# 6. What does the forward process of absorbing-state diffusion do to a text, and what does the model learn?
# 7. Give three reasons why one denoising step is enough for a drafter.
# 8. Why is a pooled tau over math and code a poor way to compare two drafters?
# 9. Why does a second pass that re-feeds the drafts not help the shipped drafter?
#
# ## Exercises
#
# Each exercise has a self-check from `dflash_lite/exercises/ch03.py`: leave the answer at `None` and
# it says so; a wrong answer raises an `AssertionError` with a hint. Worked solutions:
# `notebooks/solutions/03_block_diffusion_drafter.py`. Difficulty: ★ minutes, ★★ an hour, ★★★ a project.
#
# **1. ★ Reading the mask.** With anchors `[3, 6, 9]`, 12 context positions and B = 4 (the figure in
# section 1f), how many keys may one query of the last block attend to?

# %% nbgrader={"grade": false, "grade_id": "ch03_exercise_1", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch03 import check_visible_keys
### BEGIN SOLUTION
answer_1 = None   # your answer: an int
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch03_exercise_1_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_visible_keys(answer_1), 1)

# %% [markdown]
# **2. ★★ Where is the drafter unsure?** Write `least_sure_position(ids)`: for a prompt `ids`
# (a `(1, C)` tensor of token ids), draft its first block as in section 1 and return the block
# position (an int in 1..B-1) where the drafter's top-1 probability is lowest. Print its top-3
# candidates for the section-1 prompt, with their probabilities. The check tries several prompts.

# %% nbgrader={"grade": false, "grade_id": "ch03_exercise_2", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch03 import check_least_sure_position
def least_sure_position(ids):
    ### BEGIN SOLUTION
    return None   # an int in 1..block_size-1
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch03_exercise_2_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_least_sure_position(least_sure_position, drafter, target, tokenizer, block_size), 2)

# %% [markdown]
# **3. ★★ A second pass by hand.** Using `my_draft_logits` (or `drafter.draft_logits`) on the
# section-1 prompt, replace the masks of `block` by the first-pass draft and run the drafter again.
# Your answer is the second-pass draft, a tensor of B-1 token ids; the check compares it with
# `DFlashProposer(..., passes=2)`.

# %% nbgrader={"grade": false, "grade_id": "ch03_exercise_3", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch03 import check_second_pass
### BEGIN SOLUTION
answer_3 = None   # your answer: a LongTensor of shape (block_size - 1,)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch03_exercise_3_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_second_pass(answer_3, drafter, target, ids, block_size), 2)

# %% [markdown]
# **4. ★★ Train 16, run 8.** The shipped drafter was trained with B = 16. Measure its tau on all the
# prompts of section 4 (`prompt_ids["math"] + prompt_ids["code"]`, `max_new_tokens`, `stops`) at
# block size 8, pooling the steps of every prompt. Does it
# lose much, and why (hint: look at the acceptance-by-position curve)?

# %% nbgrader={"grade": false, "grade_id": "ch03_exercise_4", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch03 import check_tau_at_block_size
### BEGIN SOLUTION
answer_4 = None   # your answer: tau (a float)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch03_exercise_4_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_tau_at_block_size(answer_4, drafter, target, prompt_ids["math"] + prompt_ids["code"], 8,
                              max_new_tokens, stops), 2)

# %% [markdown]
# **5. ★★★ MDLM-style unmasking.** Write a subclass of `DFlashProposer` whose `propose(last, depths)`
# runs one pass, keeps the `(k + 1) // 2` drafts with the highest top-1 probability, puts the mask
# back on the others, runs the drafter once more on that block (the context is in the proposer's cache
# after the first pass: give the second `draft_logits` call `self.new_context[:, :0]`, `start=` the
# position of `last`, `self.new_context_start[0] + self.new_context.shape[1]`, and the proposer's
# cache, `self.cache`), fills the re-masked slots with its argmax and returns all k drafts as
# `[ChainDraft(tokens)]` (`from dflash_lite.decoding.decode import ChainDraft`). A proposer drafts a batch: `last`
# holds each row's last token and `depths` each row's k, and it returns one draft per row
# (`dflash_lite/decoding/proposers.py`); here the batch is one request, so `last[0]` and `depths[0]`. The check
# here makes sure `propose` returns one `ChainDraft` of k drafts, runs your proposer in the decode
# loop on the math prompts (its output must be the target's) and prints tau and tokens/s beside one
# pass: is tau higher, and does it pay for the extra forward? When a teacher grades the course, a
# hidden check also compares your first step's drafts with a reference implementation, at several
# block sizes.

# %% nbgrader={"grade": false, "grade_id": "ch03_exercise_5", "locked": false, "schema_version": 3, "solution": true, "task": false}
from dflash_lite.exercises.ch03 import check_unmasking_proposer
### BEGIN SOLUTION
answer_5 = None   # your answer: the class (not an instance)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ch03_exercise_5_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from dflash_lite.exercises import score
score(check_unmasking_proposer(answer_5, drafter, target, prompt_ids["math"], block_size,
                               max_new_tokens, stops), 3)

