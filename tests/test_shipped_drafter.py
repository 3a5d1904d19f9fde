"""The shipped pair still drafts well: target ``tiny`` with ``dflash_lite/models/tiny-dflash``.

Every other decoding test uses an untrained drafter, which is lossless however bad it is. This
one fails loudly when the trained drafter stops being accepted: wrong taps, a drafter cache that
loses its context, features that never reach the drafter, a changed checkpoint format.

Measured on 8 ``held_out`` math prompts x 96 new tokens (greedy, so deterministic): tau 6.87.
Broken on purpose, the same run gives 1.00 (projected features zeroed), 1.81 (drafter cache
dropped every step) and 3.07 (accepted positions' features never added to the context), so the
floor of 5 leaves a margin on both sides. (That its output is the target's is tested elsewhere,
with drafters of every quality.)
"""
from dflash_lite import corpus, stop_token_ids
from dflash_lite.decoding.checkpoints import load_drafter
from dflash_lite.decoding.decode import DFlashProposer, generate
from dflash_lite.decoding.target import default_drafter_path

TAU_FLOOR = 5.0


def test_shipped_drafter_reaches_the_tau_floor_on_held_out_math(tiny):
    target, tokenizer = tiny
    drafter = load_drafter(default_drafter_path("tiny"))
    stops = stop_token_ids(target, tokenizer)
    lengths = []
    for prompt in corpus.prompts("held_out", "math", 8):
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
        result = generate(target, DFlashProposer(drafter, target), ids, 96, stop_token_ids=stops)
        lengths += result.acceptance_lengths
    tau = sum(lengths) / len(lengths)                 # tokens per target forward over all steps
    assert tau > TAU_FLOOR, f"tau {tau:.2f} on held-out math, expected > {TAU_FLOOR} (measured 6.87)"
