"""The vLLM side of tools/vllm_check.py: runs in the vLLM venv (tools/vllm_venv.sh), never in the
project's, and imports nothing of dflash_lite (vLLM pins an older transformers).

One JSON object per line on stdin, one JSON answer per line on the stdout it was started with
(vLLM's own logging is sent to stderr):

* ``{"op": "start", "model": DIR, "speculative_config": {...} | null, "max_num_seqs": N,
  "dtype": "float32", "max_model_len": N}`` builds the offline ``LLM`` (no tokenizer: token ids
  in, token ids out) and answers the versions and thread settings it runs with.
* ``{"op": "generate", "groups": [[ids, ...], ...], "max_new_tokens": N, "stop_token_ids": [..]}``
  runs each group of prompts as one greedy ``llm.generate`` call, back to back, and answers the
  new token ids per prompt, the wall seconds of the calls together, and the speculative
  counters (drafts, accepted tokens, per position) that these calls added.
* ``{"op": "stop"}`` ends it.

Any failure is answered as ``{"error": "one line"}``.
"""
from __future__ import annotations

import json
import os
import sys
import time

# the answers go to the real stdout; anything else that prints (vLLM's logger) goes to stderr
ANSWERS = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr

COUNTERS = {"drafts": "vllm:spec_decode_num_drafts",
            "accepted": "vllm:spec_decode_num_accepted_tokens",
            "draft_tokens": "vllm:spec_decode_num_draft_tokens"}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def answer(obj: dict) -> None:
    ANSWERS.write(json.dumps(obj) + "\n")
    ANSWERS.flush()


def counters(llm) -> dict:
    """The speculative-decoding counters so far (summed over engines), and accepted per position."""
    values = {key: 0 for key in COUNTERS}
    per_position: list[int] = []
    for metric in llm.get_metrics():
        for key, name in COUNTERS.items():
            if metric.name == name:
                values[key] += int(metric.value)
        if metric.name == PER_POSITION:
            got = [int(v) for v in metric.values]
            per_position = [a + b for a, b in zip(per_position, got)] if per_position else got
            per_position += got[len(per_position):]
    values["per_position"] = per_position
    return values


def start(request: dict):
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import torch
    import vllm
    from vllm import LLM

    options = dict(model=request["model"], dtype=request.get("dtype", "float32"),
                   enforce_eager=True, skip_tokenizer_init=True, disable_log_stats=False,
                   max_num_seqs=request.get("max_num_seqs", 16), seed=0,
                   # the same prompts come back every round: no cached prefill, as in our loop
                   enable_prefix_caching=False)
    if request.get("max_model_len"):
        options["max_model_len"] = request["max_model_len"]
    if request.get("speculative_config"):
        options["speculative_config"] = request["speculative_config"]
    t0 = time.perf_counter()
    llm = LLM(**options)
    info = {"vllm": vllm.__version__, "torch": torch.__version__,
            "startup_seconds": time.perf_counter() - t0,
            "env": {k: os.environ.get(k) for k in (
                "VLLM_TARGET_DEVICE", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND",
                "VLLM_CPU_NUM_OF_RESERVED_CPU", "OMP_NUM_THREADS",
                "VLLM_ENABLE_V1_MULTIPROCESSING")},
            "frontend_threads": torch.get_num_threads()}
    return llm, info


def generate(llm, request: dict) -> dict:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=request["max_new_tokens"],
                            stop_token_ids=request.get("stop_token_ids") or None,
                            detokenize=False)
    before = counters(llm)
    outputs, seconds = [], 0.0
    for group in request["groups"]:
        prompts = [TokensPrompt(prompt_token_ids=ids) for ids in group]
        t0 = time.perf_counter()
        done = llm.generate(prompts, params, use_tqdm=False)
        seconds += time.perf_counter() - t0
        outputs += [list(o.outputs[0].token_ids) for o in done]
    after = counters(llm)
    delta = {k: after[k] - before[k] for k in COUNTERS}
    delta["per_position"] = [a - (before["per_position"][i] if i < len(before["per_position"])
                                  else 0) for i, a in enumerate(after["per_position"])]
    return {"tokens": outputs, "seconds": seconds, **delta}


def main() -> None:
    llm = None
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            op = request.get("op")
            if op == "start":
                llm, info = start(request)
                answer(info)
            elif op == "generate":
                if llm is None:
                    raise ValueError("generate before start")
                answer(generate(llm, request))
            elif op == "stop":
                if llm is not None:               # the engine and worker processes end too
                    llm.llm_engine.engine_core.shutdown(timeout=30)
                answer({"stopped": True})
                break
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as e:          # one line back; the caller decides
            first = str(e).splitlines()[0] if str(e) else ""
            answer({"error": f"{type(e).__name__}: {first}"})
    ANSWERS.close()
    os._exit(0)      # no waiting on vLLM's background threads


if __name__ == "__main__":
    main()
