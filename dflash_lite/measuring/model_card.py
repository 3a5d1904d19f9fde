"""Model cards (``MODEL_CARD.md`` + ``card.json``), every number measured here on held-out data: a
target's (:func:`write_card`, ``python -m dflash_lite.zoo card DIR`` on a ``zoo train-target`` run)
and a drafter's (:func:`write_drafter_card`, ``zoo drafter-card``; docs/method.md#measuring)."""
from __future__ import annotations

import ast
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from .. import corpus, outputs
from ..decoding.baselines import generate_autoregressive
from ..decoding.target import load_pretrained, stop_token_ids
from ..files import atomic_write_text
from ..validate import MAX_REPEATS, check_int
from .benchmark import bench
from .report import OUR_DFLASH_KINDS, format_cost_model, format_table, rows_of

CARD_FILES = ("card.json", "MODEL_CARD.md")   # written into the model's folder (not the package's)


def complete(model, tokenizer, prompt: str, max_new_tokens: int) -> str:
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    result = generate_autoregressive(model, ids, max_new_tokens,
                                     stop_token_ids=stop_token_ids(model, tokenizer))
    return tokenizer.decode(result.tokens, skip_special_tokens=True)


def math_accuracy(model, tokenizer, n: int = 200, max_new_tokens: int = 128) -> tuple[float, list]:
    """Final-answer accuracy of greedy completions of ``n`` generated problems with seeds at or
    above ``corpus.HELD_OUT_SEED`` (training draws below it), and the rows."""
    problems = corpus.math_problems(n, split="held_out")
    rows = []
    for p in tqdm(problems, desc="math", mininterval=5, disable=None):
        text = complete(model, tokenizer, p.prompt, max_new_tokens)
        rows.append({"prompt": p.prompt, "completion": text, "answer": p.answer,
                     "predicted": corpus.final_answer(text)})
    return sum(r["predicted"] == r["answer"] for r in rows) / n, rows


def code_parse_rate(model, tokenizer, n: int = 100,
                    max_new_tokens: int = 160) -> tuple[float, list]:
    """The share of ``n`` held-out stdlib function headers whose greedy completion ``ast.parse``s
    once cut at the function's end, and the rows (``parses_with_body``: it also adds a body)."""
    headers = corpus.function_headers(corpus.stdlib_files("held_out"), n)
    if len(headers) < n:
        raise RuntimeError(f"only {len(headers)} held-out function headers available, {n} asked")
    rows = []
    for header in tqdm(headers, desc="code", mininterval=5, disable=None):
        text = complete(model, tokenizer, header, max_new_tokens)
        source = corpus.truncate_function(header, text)
        try:
            ast.parse(source)
            parses = True
        except SyntaxError:
            parses = False
        # stricter: the completion must also add a body (a docstring-only function parses trivially)
        rows.append({"prompt": header, "completion": text, "parses": parses,
                     "parses_with_body": parses and bool(source[len(header):].strip())})
    return sum(r["parses"] for r in rows) / n, rows


def write_card(path: str | Path, n_math: int = 200, n_code: int = 100) -> dict:
    path = Path(path)
    if not (path / "training_log.json").is_file():          # read after loading: checked first
        raise ValueError(f"{path}: no training_log.json (a card is written for a target of "
                         f"`python -m dflash_lite.zoo train-target`)")
    outputs.guard_output_dir(path, "card", writes=CARD_FILES)    # before the evaluation, not after
    model, tokenizer = load_pretrained(path)
    log = json.loads((path / "training_log.json").read_text())
    torch.manual_seed(0)
    t0 = time.time()
    acc, math_samples = math_accuracy(model, tokenizer, n_math)
    parse, code_samples = code_parse_rate(model, tokenizer, n_code)
    card = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "architecture": type(model).__name__,
        "config": {k: getattr(model.config, k) for k in (
            "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
            "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings")},
        "held_out_loss": log["held_out_loss"],
        "math_final_answer_accuracy": {"n": n_math, "accuracy": acc},
        "code_ast_parse_rate": {"n": n_code, "rate": parse, "rate_with_body": sum(
            r["parses_with_body"] for r in code_samples) / n_code},
        "training": {k: log.get(k) for k in ("seed", "steps_done", "train_seconds", "device",
                                             "torch", "bf16_autocast", "ld_preload", "command")},
        "corpus_manifest": log["corpus_manifest"],
        "measured_on": f"{platform.machine()} cpu, torch {torch.__version__}, "
                       f"{torch.get_num_threads()} threads",
        "evaluation_seconds": round(time.time() - t0, 1),
        "samples": {"math": math_samples[:3], "code": code_samples[:3]},
    }
    atomic_write_text(path / "card.json", json.dumps(card, indent=1))
    atomic_write_text(path / "MODEL_CARD.md", render_card(card))
    print(f"math accuracy {acc:.3f} (n={n_math}); code parse rate {parse:.3f} "
          f"(with a body {card['code_ast_parse_rate']['rate_with_body']:.3f}, n={n_code}); "
          f"held-out loss {log['held_out_loss']}")
    return card


def render_card(card: dict) -> str:
    """The target's MODEL_CARD.md: what it is, corpus, training, measurements, samples, limits."""
    cfg, man, tr = card["config"], card["corpus_manifest"], card["training"]
    lines = [
        "# dflash-lite `tiny` target", "",
        f"A `{card['architecture']}` ({card['parameters'] / 1e6:.2f}M parameters, "
        "tied embedding/LM head) trained from scratch by this project on an offline, "
        "deterministic corpus. It is the default target of every notebook and command here: "
        "small enough for a laptop CPU, trained enough that drafting against it means something.",
        "", "## Shape", "",
        "| field | value |", "|---|---|",
        *[f"| {k} | {v} |" for k, v in cfg.items()], "",
        "Weights are stored in bf16 (`model.safetensors`) and loaded in fp32 by `load_pretrained`.",
        "", "## Corpus", "",
        "- Code: the Python standard library of the training interpreter "
        f"(`{man['python_stdlib']}`), {man['code_files']} train-split files; "
        "held-out files are chosen by a hash of their path.",
        f"- Math: {man['math_problems']} generated grade-school word problems "
        f"({len(man['math_templates'])} templates: {', '.join(man['math_templates'])}) "
        "in `Question: ... / Answer: ...` format ending with `The answer is N.`; "
        f"held-out problems use generator seeds >= {man['held_out_seed']}.",
        f"- Tokens: {man.get('tokens')}; corpus manifest sha256 `{man['sha256']}`.",
        "- Tokenizer: byte-level BPE trained with `tokenizers` on the same text; reserves "
        "`<|endoftext|>` (EOS and padding) and `<|mask|>` (the DFlash drafter's mask token).",
        "- Never trained on any benchmark set (GSM8K, HumanEval): those are held-out judges.",
        "", "## Training", "",
        f"- Seed {tr['seed']}, {tr['steps_done']} steps, "
        f"{tr['train_seconds'] / 60:.1f} minutes on {tr['device']}, torch {tr['torch']}.",
        f"- Command: `{tr['command']}`"
        + (f" with `LD_PRELOAD={tr['ld_preload']}`" if tr.get("ld_preload") else "") + ".",
        "- To train it again, give `--out` a directory of your own "
        "(`train-target` never writes into the package) and copy the result into "
        "`dflash_lite/models/` yourself if you mean to replace a shipped target.",
        f"- bf16 autocast (fp32 master weights): {tr.get('bf16_autocast')}; "
        "AdamW, warm-up then cosine, grad-clip 1.0.",
        "- With `--time-budget-s` the cosine schedule follows wall time, so the number of steps "
        "depends on the machine; `training_log.json` records the steps done, the loss curve and "
        "the corpus manifest.",
        "", "## Measured (held out)", "",
        "| metric | value | how |", "|---|---|---|",
        f"| loss, code | {card['held_out_loss']['code']:.3f} "
        "| next-token cross-entropy, held-out stdlib files |",
        f"| loss, math | {card['held_out_loss']['math']:.3f} "
        "| next-token cross-entropy, 2000 held-out problems |",
        f"| math final-answer accuracy | {card['math_final_answer_accuracy']['accuracy']:.1%} "
        f"(n={card['math_final_answer_accuracy']['n']}) "
        "| greedy, `The answer is N.` compared with the generator's answer |",
        f"| code `ast.parse` rate | {card['code_ast_parse_rate']['rate']:.1%} "
        f"(n={card['code_ast_parse_rate']['n']}) "
        "| greedy completion of held-out function headers, cut at the function's end |",
        f"| ... and adds a body | {card['code_ast_parse_rate']['rate_with_body']:.1%} "
        f"(n={card['code_ast_parse_rate']['n']}) | the same, counting only completions with at "
        "least one line of body after the prompt (a docstring-only function parses trivially) |",
        "", "Measured with `python -m dflash_lite.zoo card dflash_lite/models/tiny` "
        f"on {card['measured_on']} ({card['evaluation_seconds']:.0f} s).",
        "", "## Sample greedy completions (held out)", "",
    ]
    for domain in ("math", "code"):
        for row in card["samples"][domain]:
            lines += ["```text", row["prompt"] + row["completion"], "```", ""]
    lines += [
        "## Limitations", "",
        "- Its arithmetic is unreliable (see the accuracy above): "
        "it learned the solution format better than the sums.",
        "- It rarely writes a function body: after a docstring it usually closes the function "
        "and starts top-level code (comments, imports), which is why the parse rate with a body "
        "is far below the plain rate.",
        "- A toy: it knows ten templates of arithmetic word problems and the surface of stdlib "
        "Python. It does not follow instructions, has no chat template, and real "
        "GSM8K/HumanEval prompts are out of its domain.",
        "- Its code is plausible-looking more often than correct; "
        "the parse rate measures syntax, not behaviour.",
        "- The corpus depends on the interpreter's stdlib version; "
        "the manifest hash records which one was used.",
        "- Context is 1024 positions; it was trained on 256-token windows.",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class DrafterCardConfig:
    """What ``python -m dflash_lite.zoo drafter-card`` measures (it builds one from its flags): the
    drafter in ``path`` (a training run's directory) against ``target`` on ``num_prompts`` held-out
    prompts per set at each of ``block_sizes``, ``repeats`` timed rounds. With ``judges`` (a folder
    with ``gsm8k_test.jsonl`` and ``humaneval.jsonl``), also GSM8K questions in the target's
    ``Question:`` format and HumanEval prompts as code, for evaluation only."""
    path: str | Path
    target: str = "tiny"
    num_prompts: int = 8
    max_new_tokens: int = 128
    repeats: int = 3
    judges: str | Path | None = None
    block_sizes: tuple[int, ...] = (16, 8)

    def check(self) -> DrafterCardConfig:
        """Options and both folders checked before any work (one ValueError line); returns self."""
        for name in ("num_prompts", "max_new_tokens"):
            check_int(name, getattr(self, name))
        check_int("repeats", self.repeats, 1, MAX_REPEATS)
        self.path = Path(self.path)
        if not (self.path / "training_curve.json").is_file():      # read at the end: checked first
            raise ValueError(f"{self.path}: no training_curve.json (a drafter card is written for "
                             "a run of `python -m dflash_lite train`)")
        outputs.guard_output_dir(self.path, "drafter-card", writes=CARD_FILES)   # before any bench
        if self.judges is not None and not all((Path(self.judges) / f).is_file()
                                               for f in ("gsm8k_test.jsonl", "humaneval.jsonl")):
            raise ValueError(f"{self.judges}: needs gsm8k_test.jsonl and humaneval.jsonl")
        return self


def write_drafter_card(config: DrafterCardConfig | None = None, **options) -> dict:
    """Benchmark a drafter against its target on held-out prompts and write its card:
    ``config`` or the :class:`DrafterCardConfig` of ``options``."""
    c = (config or DrafterCardConfig(**options)).check()
    judges = None if c.judges is None else Path(c.judges)
    sets = {"math (held-out)": {"domain": "math"}, "code (held-out)": {"domain": "code"}}
    if judges is not None:
        sets["GSM8K (judge)"] = {"prompts": str(judges / "gsm8k_test.jsonl"),
                                 "prompt_template": "Question: {prompt}\nAnswer:"}
        sets["HumanEval (judge)"] = {"prompts": str(judges / "humaneval.jsonl")}
    reports = {}
    for name, kwargs in sets.items():
        print(f"== {name}", flush=True)
        report = reports[name] = bench(
            target=c.target, drafter=str(c.path), num_prompts=c.num_prompts,
            max_new_tokens=c.max_new_tokens, block_sizes=tuple(c.block_sizes), repeats=c.repeats,
            **kwargs)
        source = report["env"].get("prompts_source", "")
        if judges is not None and source.startswith(str(judges)):  # a local folder: its file only
            report["env"]["prompts_source"] = "JUDGES/" + Path(source).name
    curve = json.loads((c.path / "training_curve.json").read_text())
    card = {"training": curve["training"],
            "final_metrics": curve["curve"][-1] if curve["curve"] else None,
            "benchmarks": reports, "command_train": curve["training"].get("command"),
            "command_card": f"python -m dflash_lite.zoo drafter-card {c.path}"
                            + (" --judges JUDGES" if judges else "")  # a local folder: not shown
                            + f" --num-prompts {c.num_prompts} "
                              f"--max-new-tokens {c.max_new_tokens} --repeats {c.repeats}"}
    atomic_write_text(c.path / "card.json", json.dumps(card, indent=1))
    atomic_write_text(c.path / "MODEL_CARD.md", render_drafter_card(card))
    return card


def render_drafter_card(card: dict) -> str:
    tr = card["training"]
    lines = [
        "# dflash-lite `tiny` DFlash drafter", "",
        f"A DFlash block-diffusion drafter for the shipped `tiny` target: {tr.get('layers', '?')} "
        f"Qwen3 layers with KV injection, block size {tr.get('block_size', '?')}, conditioned on "
        f"target layers {tr.get('target_layer_ids', '?')}; it shares the target's frozen embedding "
        "and LM head (not stored here).",
        "", "## Training", "",
        f"- Command: `{tr.get('command', '?')}`",
        f"- {tr['steps']} steps, batch {tr['batch_size']} sequences x {tr['num_anchors']} anchors, "
        f"lr {tr['lr']}, gamma {tr['gamma']}; "
        f"{tr['sequences']} target-regenerated sequences (train-split prompts only).",
        f"- Time: regeneration {tr['regenerate_seconds'] / 60:.1f} min, training "
        f"{tr['train_seconds'] / 60:.1f} min, on {tr['device']} with {tr['threads']} threads.",
    ]
    probe = tr.get("final_tau_probe")
    if isinstance(probe, dict):
        minutes = tr.get("minutes_to_tau_5") or {}
        lines.append(f"- tau probed during training on held-out prompts (B={tr.get('block_size')}, "
                     f"probe time not counted): final math {probe['math']:.2f}, code "
                     f"{probe['code']:.2f}; minutes of training to tau >= 5: math "
                     f"{minutes.get('math')}, code {minutes.get('code')} (None: not reached).")
    if card.get("final_metrics"):
        acc = card["final_metrics"]["accuracy_per_position"]
        lines.append("- Final training accuracy per block position: "
                     + ", ".join(f"{a:.2f}" for a in acc[:8]) + (" ..." if len(acc) > 8 else ""))
    lines += ["", "## Measured (greedy, CPU; ratios measured in one run per prompt set)", "",
              f"Produced by `{card['command_card']}`. Speedup is against the project's "
              "autoregressive loop (the decode loop at block size 1), `vs generate` against "
              "`model.generate`; every DFlash output was checked token for token against the "
              "target's greedy output in the same run.", ""]
    for name, report in card["benchmarks"].items():
        lines += [f"### {name}", "", "```text", format_table(report), "```", ""]
        if report.get("cost_model"):
            lines += ["Cost model (median seconds of one forward at the first prompt's context; "
                      "predicted = tau * t_target(1) / (t_target(B) + t_draft(B))):", "", "```text",
                      format_cost_model(report["cost_model"]["rows"]), "```", ""]
        for m in rows_of(report, *OUR_DFLASH_KINDS):
            if m["tau_histogram"]:
                total = sum(m["tau_histogram"])
                hist = " ".join(f"{i + 1}:{c / total:.2f}"
                                for i, c in enumerate(m["tau_histogram"]) if c)
                lines.append(f"- {m['name']}: acceptance-length histogram (length:share) {hist}; "
                             f"phase times (s) {m['phase_times']}")
        lines.append("")
    lines += ["## Limitations", "",
              "- Trained for a toy target on its own outputs; "
              "acceptance on out-of-domain text (the judges) is lower.",
              "- On CPU a verification of B tokens costs more than one of a single token "
              "(t_target(B) / t_target(1) in the cost-model tables), "
              "so the best block size on CPU can be smaller than the one trained for."]
    return "\n".join(lines) + "\n"
