"""Hidden checks: run by the grader (dflash_lite/course/grader.py) after a graded cell's own check
passed, on the namespace that cell ran in. Instructor-only: in neither the student bundle nor the
student package. ``CHECKS`` maps a grade id to a function that raises AssertionError."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location(
    "instructor_references", Path(__file__).with_name("references.py")
)
references = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(references)


def _pairs(seed: int, count: int = 8):
    g = torch.Generator().manual_seed(1000 + seed)
    for size in (3, 9, 33)[: 1 + seed % 3] + (17,):
        for _ in range(count):
            p = torch.rand(size, generator=g, dtype=torch.float64) ** 3
            q = torch.rand(size, generator=g, dtype=torch.float64) ** 3
            yield p / p.sum(), q / q.sum()


def ch02_article_output(ns: dict) -> None:
    for p, q in _pairs(2):
        got = torch.as_tensor(ns["article_output"](p.clone(), q.clone()), dtype=torch.float64)
        torch.testing.assert_close(got, references.article_output(p, q))


def ch02_tv(ns: dict) -> None:
    from dflash_lite.decoding.acceptance import SamplingParams, target_probs

    target, draft, tokenizer = ns["target"], ns["draft"], ns["tokenizer"]
    params = SamplingParams(temperature=0.7, top_p=0.9)
    x = tokenizer("Question:", return_tensors="pt").input_ids
    with torch.inference_mode():
        p = target_probs(target(x).logits[0, -1:], params)[0].double()
        q = target_probs(draft(x).logits[0, -1:], params)[0].double()
    expected = 0.5 * float((references.article_output(p, q) - p).abs().sum())
    assert abs(float(ns["answer_3"]) - expected) < 1e-4, "not the TV of the processed rule"


def ch02_lookup(ns: dict) -> None:
    g = torch.Generator().manual_seed(77)
    for _ in range(200):
        tokens = torch.randint(
            0, 3, (int(torch.randint(0, 25, (1,), generator=g)),), generator=g
        ).tolist()
        k, n = int(torch.randint(1, 7, (1,), generator=g)), int(
            torch.randint(1, 4, (1,), generator=g)
        )
        assert list(ns["lookup_draft"](list(tokens), k, ngram=n)) == references.lookup_draft(
            tokens, k, n
        )


def ch03_unmasking(ns: dict) -> None:
    from dflash_lite.decoding.decode import generate
    from dflash_lite.exercises.ch03 import _first_block

    answer, drafter, target = ns["answer_5"], ns["drafter"], ns["target"]
    block_size, prompt_ids = ns["block_size"], ns["prompt_ids"]["math"]
    reference = references.unmasking_proposer()
    from dflash_lite import corpus

    tokenizer = ns.get("tokenizer")
    extra = (
        []
        if tokenizer is None
        else [
            tokenizer(t, return_tensors="pt").input_ids
            for t in corpus.function_headers(corpus.stdlib_files("held_out"), 2, seed=5)
        ]
    )
    for size in (block_size, 8, 12):
        for x in list(prompt_ids) + extra:
            features, last, _ = _first_block(drafter, target, x, size)
            drafts = []
            for cls in (answer, reference):
                proposer = cls(drafter, target, size)
                proposer.start(x, features)
                drafts.append(proposer.propose(last.view(1), [size - 1])[0].tokens.cpu())
            assert torch.equal(
                drafts[0], drafts[1]
            ), f"B={size}: a first step's draft differs from the reference"
    for x in prompt_ids:
        mine = generate(
            target,
            answer(drafter, target, block_size),
            x,
            ns["max_new_tokens"],
            stop_token_ids=ns["stops"],
        )
        ref = generate(
            target,
            reference(drafter, target, block_size),
            x,
            ns["max_new_tokens"],
            stop_token_ids=ns["stops"],
        )
        assert mine.acceptance_lengths == ref.acceptance_lengths, "a later step drafts differently"


def ch07_mse(ns: dict) -> None:
    g = torch.Generator().manual_seed(5)
    for n, k, v in ((2, 4, 7), (4, 3, 19)):
        logits = torch.randn(n, k, v, generator=g) * 3
        labels = torch.randint(0, v, (n, k), generator=g)
        weights = torch.rand(k, generator=g) + 0.1
        got = torch.as_tensor(ns["mse_on_probs"](logits, labels, weights))
        torch.testing.assert_close(got, references.mse_on_probs(logits, labels, weights))


CHECKS = {
    "ch02_exercise_2_check": ch02_article_output,
    "ch02_exercise_3_check": ch02_tv,
    "ch02_exercise_4_check": ch02_lookup,
    "ch03_exercise_5_check": ch03_unmasking,
    "ch07_exercise_2_check": ch07_mse,
}


# ---------------------------------------------------------------------------------------------
# Build-it cells: the student's code against the package on inputs other than the notebook's one

import ast  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import torch.nn.functional as F  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
SOLUTION_KEY = "__dflash_solution__"  # dflash_lite.course.grader.SOLUTION_KEY


def _instructor_cell(chapter: str, grade_id: str) -> str:
    path = next(NOTEBOOKS.glob(f"{chapter}_*.ipynb"))
    cells = json.loads(path.read_text())["cells"]
    cell = next(
        c for c in cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id
    )
    return "".join(cell["source"])


def _parse(source: str) -> ast.Module:
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    return ast.parse("\n".join(lines))


def _setup_statements(source: str) -> set[str]:
    """The top-level statements of the instructor's cell that hold no solution line (the cell's
    given setup), as ast dumps."""
    inside, region = set(), False
    for number, line in enumerate(source.splitlines(), 1):
        if "### BEGIN SOLUTION" in line:
            region = True
        if region:
            inside.add(number)
        if "### END SOLUTION" in line:
            region = False
    return {
        ast.dump(node)
        for node in _parse(source).body
        if not inside & set(range(node.lineno, node.end_lineno + 1))
    }


def _rerun(ns: dict, chapter: str, grade_id: str, inputs: dict) -> dict:
    """Run the student's solution cell (as submitted) once more, its given setup statements left
    out and their values taken from ``inputs``; returns the namespace it ran in."""
    source = ns.get(SOLUTION_KEY)
    assert isinstance(source, str), "the solution cell's source did not reach the check"
    setup = _setup_statements(_instructor_cell(chapter, grade_id))
    body = [
        node for node in _parse(source).body
        if ast.dump(node) not in setup and not _binds_only(node, set(inputs))
    ]
    env = _Pinned({**ns, **inputs}, pinned=set(inputs))
    env.pop(SOLUTION_KEY, None)
    exec(compile(ast.Module(body=body, type_ignores=[]), "<solution cell>", "exec"), env)
    return dict(env)


def _binds_only(node: ast.stmt, names: set[str]) -> bool:
    """``node`` is an assignment to some of ``names`` only (a given setup line the student
    rewrote: the check supplies those values, so the line need not run)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    else:
        return False
    bound = [n for t in targets for n in ast.walk(t)
             if not isinstance(n, (ast.Tuple, ast.List, ast.Load, ast.Store))]
    return all(isinstance(n, ast.Name) and n.id in names for n in bound)


class _Pinned(dict):
    """A namespace whose ``pinned`` names keep the values the check gave them: a given setup line
    the student rewrote (so it no longer matches the instructor's) still runs, but its assignment
    to an input is ignored, and the cell sees the check's input."""

    def __init__(self, values: dict, pinned: set[str]):
        super().__init__(values)
        self.pinned = pinned

    def __setitem__(self, name, value):
        if name not in self.pinned:
            super().__setitem__(name, value)


class _swapped:
    """Within the block, ``fn``'s global ``name`` is ``value`` (the student's other functions
    replaced by the package's, so a cell is graded on its own code only)."""

    def __init__(self, fn, name: str, value):
        self.space, self.name, self.value = fn.__globals__, name, value

    def __enter__(self):
        self.had, self.old = self.name in self.space, self.space.get(self.name)
        self.space[self.name] = self.value

    def __exit__(self, *exc):
        if self.had:
            self.space[self.name] = self.old
        else:
            self.space.pop(self.name, None)


def _random_drafter(config, num_layers: int, seed: int):
    """A drafter of ``config``'s shapes with random weights, norms included."""
    from dflash_lite.decoding.drafter import DFlashDrafter

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        drafter = DFlashDrafter(
            dataclasses.replace(config, num_layers=num_layers, layer_types=None)
        ).eval()
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.5 * torch.randn_like(p))
    return drafter


def ch03_context(ns: dict) -> None:
    from dflash_lite.decoding.target import context_features

    drafter = ns["drafter"]
    c = drafter.config
    g = torch.Generator().manual_seed(303)
    for taps, C in (([0, 3, 6], 5), ([7], 9), ([2, 4], 3)):
        config = dataclasses.replace(c, target_layer_ids=taps)
        other = _random_drafter(config, 1, seed=len(taps))
        hidden = [torch.randn(1, C, c.hidden_size, generator=g)
                  for _ in range(c.num_target_layers + 1)]
        features = context_features(hidden, taps)
        env = _rerun(
            ns,
            "03",
            "ch03_build_context",
            dict(
                out=SimpleNamespace(hidden_states=hidden, logits=torch.zeros(1, C, 1)),
                c=config,
                drafter=other,
                features=features,
                C=C,
                H=c.hidden_size,
                eps=c.rms_norm_eps,
            ),
        )
        assert torch.equal(env["my_features"], features), f"taps {taps}: not the tapped features"
        with torch.no_grad():
            torch.testing.assert_close(env["context"], other.project(features))
        for scale in (1e-4, 1e-2, 1.0, 30.0):  # where eps matters, and where it does not
            x = torch.randn(2, C, c.hidden_size, generator=g) * scale
            weight = 1 + torch.randn(c.hidden_size, generator=g)
            torch.testing.assert_close(
                env["rms_norm"](x, weight),
                F.rms_norm(x, (c.hidden_size,), weight, c.rms_norm_eps),
                msg=f"rms_norm differs on inputs of scale {scale:g}",
            )


def _reference_attention(drafter):
    """``kv_injection_attention`` as the package computes it."""

    def attention(attn, x, context, x_pos, ctx_pos, mask=None):
        rope_x = drafter.rotary_emb(x, x_pos[None])
        rope_c = drafter.rotary_emb(context, ctx_pos[None])
        return attn(x, context, rope_x, rope_c, cache=None, layer=0,
                    attn_mask=None if mask is None else mask[None, None])

    return attention


def _positions_and_masks(g, C: int, Q: int):
    """Context and block positions that do not start at 0 and have a gap, and masks: none, a
    random one (every row sees something), and the training kind (context before an anchor)."""
    start = int(torch.randint(1, 40, (1,), generator=g))
    gap = int(torch.randint(0, 5, (1,), generator=g))
    ctx_pos = torch.arange(start, start + C)
    x_pos = torch.arange(start + C + gap, start + C + gap + Q)
    rand = torch.rand(Q, C + Q, generator=g) < 0.5
    rand[:, C] = True
    anchor = torch.zeros(Q, C + Q, dtype=torch.bool)
    anchor[:, : C // 2] = True
    anchor[:, C:] = True
    return ctx_pos, x_pos, (None, rand, anchor)


def ch03_kv_injection(ns: dict) -> None:
    mine, drafter = ns["kv_injection_attention"], ns["drafter"]
    reference = _reference_attention(drafter)
    H = drafter.config.hidden_size
    g = torch.Generator().manual_seed(304)
    for C, Q in ((7, 4), (12, 16), (3, 9)):
        ctx_pos, x_pos, masks = _positions_and_masks(g, C, Q)
        x, context = torch.randn(1, Q, H, generator=g), torch.randn(1, C, H, generator=g)
        for layer in drafter.layers:
            for mask in masks:
                with torch.no_grad():
                    got = mine(layer.self_attn, x, context, x_pos, ctx_pos, mask)
                    want = reference(layer.self_attn, x, context, x_pos, ctx_pos, mask)
                kind = "no mask" if mask is None else "a mask"
                torch.testing.assert_close(
                    got, want, msg=f"C={C}, Q={Q}, positions from {int(ctx_pos[0])}, {kind}"
                )


def ch03_drafter_forward(ns: dict) -> None:
    mine, drafter, target = ns["my_draft_logits"], ns["drafter"], ns["target"]
    c = drafter.config
    g = torch.Generator().manual_seed(305)
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    for num_layers, (C, Q) in ((1, (6, 8)), (3, (11, 5))):
        other = _random_drafter(c, num_layers, seed=num_layers)
        ctx_pos, x_pos, masks = _positions_and_masks(g, C, Q)
        block = torch.randint(0, c.vocab_size, (1, Q), generator=g)
        features = torch.randn(1, C, c.num_context_features, generator=g)
        for mask in masks:
            with torch.no_grad():
                hidden = other(embed(block), features, x_pos[None], ctx_pos[None], None,
                               None if mask is None else mask[None, None])
                want = head(hidden)
                with _swapped(mine, "drafter", other), _swapped(
                    mine, "kv_injection_attention", _reference_attention(other)
                ):
                    got = mine(block, features, x_pos, ctx_pos, mask)
            kind = "no mask" if mask is None else "a mask"
            torch.testing.assert_close(
                got, want, msg=f"{num_layers} layers, C={C}, Q={Q}, {kind}"
            )


def ch05_loss(ns: dict) -> None:
    from dflash_lite.training.train import loss_gamma, position_weights

    g = torch.Generator().manual_seed(505)
    for B, M, V in ((8, 40, 30), (4, 25, 11), (16, 90, 50)):
        k = torch.cat([torch.arange(1, B), torch.randint(1, B, (M - (B - 1),), generator=g)])
        k = k[torch.randperm(M, generator=g)]
        logits = torch.randn(M, V, generator=g) * 4
        labels = torch.randint(0, V, (M,), generator=g)
        hits = torch.rand(M, generator=g) < 0.4
        labels[hits] = logits[hits].argmax(-1)
        env = _rerun(
            ns,
            "05",
            "ch05_build_loss",
            dict(logits=logits, labels=labels, k=k, block_size=B, gamma=loss_gamma(B),
                 device="cpu"),
        )
        w = position_weights(B)
        ce = F.cross_entropy(logits, labels, reduction="none")
        loss = (ce * w[k - 1]).sum() / w[k - 1].sum()
        accuracy = [(logits.argmax(-1) == labels)[k == j].float().mean().item()
                    for j in range(1, B)]
        torch.testing.assert_close(env["w"], w, msg=f"B={B}: the weights")
        torch.testing.assert_close(env["ce"], ce, msg=f"B={B}: the cross-entropy")
        torch.testing.assert_close(torch.as_tensor(env["my_loss"]), loss, msg=f"B={B}: the loss")
        torch.testing.assert_close(
            torch.as_tensor(env["my_accuracy"], dtype=torch.float32),
            torch.tensor(accuracy),
            msg=f"B={B}: the per-position accuracy",
        )


def ch05_training(ns: dict) -> None:
    """The weights that reach ``drafter_loss`` are the ones ``train`` was given (up to a scale,
    which the normalised loss ignores): each loss it trains on is the reference loss with those
    weights."""
    train, block_size = ns["answer_5"], ns["block_size"]
    assert callable(train), "answer_5 is not a function"
    from dflash_lite.training.train import drafter_loss as real

    g = torch.Generator().manual_seed(506)
    for given in (torch.rand(block_size - 1, generator=g) + 0.2,
                  torch.linspace(1.0, 0.1, block_size - 1)):
        used = []

        def recording(model, target, batch, weights, *args, **kwargs):
            used.append(torch.as_tensor(weights).detach().float().cpu().clone())
            return real(model, target, batch, weights, *args, **kwargs)

        with _swapped(train, "drafter_loss", recording):
            train(given.clone(), 3, 2)
        assert used, "train never called drafter_loss"
        for weights in used:
            assert weights.shape == given.shape, "drafter_loss got weights of another shape"
            torch.testing.assert_close(
                weights / weights.sum(), given / given.sum(),
                msg="drafter_loss got other weights than train's (flipped, permuted, replaced?)",
            )


def _random_tree(g, size: int):
    from dflash_lite.decoding.tree import DraftTree

    parents, depths = [-1], [0]
    for i in range(1, size):
        p = int(torch.randint(max(0, i - 4), i, (1,), generator=g))  # deep and bushy
        parents.append(p)
        depths.append(depths[p] + 1)
    return DraftTree(torch.randint(0, 100, (size,), generator=g), parents, depths)


def ch09_tree_mask(ns: dict) -> None:
    from dflash_lite.decoding.tree import build_tree

    g = torch.Generator().manual_seed(909)
    trees = [_random_tree(g, n) for n in (1, 2, 9, 30)]
    trees += [build_tree(torch.tensor([1]), torch.log_softmax(torch.randn(7, 40, generator=g) * 3,
                                                              -1), n) for n in (5, 20)]
    for tree in trees:
        env = _rerun(ns, "09", "ch09_build_tree_mask",
                     dict(tree=tree, ancestors=torch.eye(len(tree), dtype=torch.bool)))
        assert torch.equal(env["ancestors"], tree.ancestor_mask()), \
            f"a {len(tree)}-node tree (parents {tree.parents[:12]}...): not its ancestor mask"


def ch09_best_paths(ns: dict) -> None:
    from dflash_lite.decoding.tree import build_tree

    mine = ns["best_paths"]
    g = torch.Generator().manual_seed(910)
    for D, V, N, budget in ((15, 60, 12, 12), (3, 20, 6, 40), (1, 9, 4, 3), (7, 50, 20, 50),
                            (2, 5, 2, 10), (10, 30, 8, 1)):
        top_logp, top_ids = torch.log_softmax(torch.randn(D, V, generator=g) * 2.5, -1).topk(N)
        tree = build_tree(torch.tensor([0]), top_logp, budget)   # tokens = ranks into top_ids
        want = []
        for i in range(1, len(tree)):
            path, j = [], i
            while j > 0:
                path.append(int(tree.tokens[j]))
                j = tree.parents[j]
            want.append(tuple(int(top_ids[d, r]) for d, r in enumerate(reversed(path))))
        got = [tuple(int(t) for t in p) for p in mine(top_logp, top_ids, budget)]
        assert sorted(got) == sorted(want), f"D={D}, N={N}, budget {budget}: other paths"
        ids = top_ids.tolist()
        scores = [sum(float(top_logp[d, ids[d].index(t)]) for d, t in enumerate(p)) for p in got]
        assert all(a >= b - 1e-9 for a, b in zip(scores, scores[1:])), \
            f"D={D}, N={N}, budget {budget}: the paths are not best first"


def _batch_reference(at: list[int], width: int, ancestors=None, depths=None):
    """The package's mask and positions for rows at ``at`` (a single row through a two-row cache:
    one row alone takes the cache's one-request path, which may return no mask at all)."""
    from dflash_lite.decoding.cache import SlotCache

    rows = at if len(at) > 1 else at * 2
    cache = SlotCache(1, rows=len(rows))
    cache.rewind(rows)
    mask = cache.verify_mask(width, ancestors, depths)["full_attention"][: len(at)]
    positions = cache.positions(width, depths)[: len(at)]
    return mask, positions


def _batches(g):
    """Write positions of batches of 1 to 6 rows (0: nothing committed yet), with ties."""
    out = [[0, 3], [7], [4, 4, 4], [0, 0]]
    for rows in (2, 3, 5, 6):
        out.append([int(x) for x in torch.randint(0, 30, (rows,), generator=g)])
    return out


def ch11_verify_mask(ns: dict) -> None:
    mine = ns["batch_verify_mask"]
    g = torch.Generator().manual_seed(1111)
    for at in _batches(g):
        for width in (1, 2, 5, 16):
            chain = torch.ones(width, width, dtype=torch.bool).tril()
            want, _ = _batch_reference(at, width)
            got = torch.as_tensor(mine(list(at), chain))
            assert got.shape == want.shape and torch.equal(got.bool(), want), \
                f"rows at {at}, a chain of {width}: not the batch's verify mask"
        for size in (3, 11):
            tree = _random_tree(g, size)
            ancestors, depths = tree.ancestor_mask(), torch.tensor(tree.depths)
            want, _ = _batch_reference(at, size, ancestors, depths)
            got = torch.as_tensor(mine(list(at), ancestors))
            assert got.shape == want.shape and torch.equal(got.bool(), want), \
                f"rows at {at}, a {size}-node tree: not the batch's verify mask"


def ch11_positions(ns: dict) -> None:
    mine = ns["batch_positions"]
    g = torch.Generator().manual_seed(1112)
    for at in _batches(g):
        for depths in (torch.arange(1), torch.arange(7), torch.tensor(_random_tree(g, 9).depths)):
            _, want = _batch_reference(at, len(depths), depths=depths)
            got = torch.as_tensor(mine(list(at), depths))
            assert got.shape == want.shape and torch.equal(got.long(), want), \
                f"rows at {at}, depths {depths.tolist()}: not the position ids"


CHECKS.update(
    {
        "ch03_build_context_check": ch03_context,
        "ch03_build_kv_injection_check": ch03_kv_injection,
        "ch03_build_drafter_forward_check": ch03_drafter_forward,
        "ch05_build_loss_check": ch05_loss,
        "ch05_exercise_5_check": ch05_training,
        "ch09_build_best_paths_check": ch09_best_paths,
        "ch09_build_tree_mask_check": ch09_tree_mask,
        "ch11_build_verify_mask_check": ch11_verify_mask,
        "ch11_build_positions_check": ch11_positions,
    }
)


# ---------------------------------------------------------------------------------------------
# Collected benchmark reports: a report is plain data a student could write by hand so that a
# check's consistency tests pass. Timings cannot be re-derived, but a report's ratios must follow
# from its own times, and greedy (or seeded) acceptance lengths are deterministic: one row of the
# report is run again here, on the report's own prompts, target and drafter, and must match.

ROOT = Path(__file__).resolve().parent.parent
_LOADED: dict = {}


def _close(a, b, rel: float = 1e-9) -> bool:
    return a is not None and b is not None and abs(float(a) - float(b)) <= rel * max(
        1.0, abs(float(b)))


def _ratios(report: dict) -> None:
    """Every row's speedups are its tokens/s over the base rows' (the report's own times), its
    tokens/s lies in its spread, and the cost model's rows follow from the report's rows."""
    from dflash_lite.measuring.report import cost_model

    rows = report["methods"]
    columns = [("speedup", "autoregressive", False),
               ("speedup_vs_hf_generate", "hf_generate", False)]
    if any(r.get("compiled") for r in rows):
        columns.append(("speedup_vs_compiled", "autoregressive", True))
    for r in rows:
        tps, spread = r.get("tokens_per_s"), r.get("tokens_per_s_spread")
        if tps is not None:
            assert spread and spread[0] - 1e-9 <= tps <= spread[1] + 1e-9, \
                f"{r['name']}: its tokens/s lies outside its own spread"
    for column, kind, compiled in columns:
        base = next((r["tokens_per_s"] for r in rows if r["kind"] == kind
                     and bool(r.get("compiled")) == compiled and r.get("tokens_per_s")), None)
        for r in rows:
            if r.get(column) is not None or (base and r.get("tokens_per_s")):
                assert base and r.get("tokens_per_s") and _close(
                    r.get(column), r["tokens_per_s"] / base), \
                    f"{r['name']}: its {column} is not its tokens/s over the {kind} row's"
    model = report.get("cost_model") or {}
    if model.get("costs") and "rows" in model:
        want = {r["name"]: r for r in cost_model(report, model["costs"])}
        got = {r.get("name"): r for r in model["rows"]}
        assert set(got) == set(want), "the cost model's rows are not the report's DFlash rows"
        for name, r in want.items():
            for key in ("tau", "predicted_speedup", "measured_speedup"):
                assert r[key] == got[name].get(key) or _close(got[name].get(key), r[key]), \
                    f"the cost model's {name}: its {key} does not follow from the report"


def _report_prompts(env: dict, path=None) -> list[str]:
    """The prompt texts a report ran on (its ``prompts_source``), templated as bench does."""
    from dflash_lite.prompts import builtin_prompts, dataset_prompts, load_prompts

    source, n = str(env.get("prompts_source", "")), int(env["prompts"])
    if path is not None:
        texts = load_prompts(str(path), n)
    elif source.startswith("built-in held-out "):
        texts = builtin_prompts(source.removeprefix("built-in held-out "), n)
    elif source.startswith("dataset "):
        texts = dataset_prompts(source.removeprefix("dataset "), n)
    else:
        texts = load_prompts(source, n)
    assert len(texts) == n, "the report names more prompts than its source has"
    template = str(env.get("prompt_template", "{prompt}"))
    return [template.replace("{prompt}", t) for t in texts]


def _local(name: str) -> str:
    """A path as bench records it (inside this checkout: relative to it)."""
    return str(ROOT / name) if not Path(name).exists() and (ROOT / name).exists() else name


def _models(env: dict, drafter_dir=None):
    from dflash_lite.decoding.checkpoints import load_drafter
    from dflash_lite.decoding.target import load_pretrained

    dtype = str(env.get("dtype") or "float32")
    key = (str(env["target"]), dtype)
    if key not in _LOADED:
        _LOADED[key] = load_pretrained(_local(str(env["target"])), dtype=dtype)
    target, tokenizer = _LOADED[key]
    drafter = env.get("drafter") if drafter_dir is None else str(drafter_dir)
    return target, tokenizer, (None if drafter is None else
                               load_drafter(_local(str(drafter)), dtype=dtype).eval())


def _rerun_row(report: dict, block_size: int | None = None, drafter_dir=None,
               prompts_path=None, budget: int = 400) -> dict:
    """Run one deterministic row of ``report`` again (the fixed-block DFlash row of
    ``block_size``, else its largest one, else the autoregressive row) on the report's prompts,
    and compare its tau and acceptance histogram with the report's; returns the row. A report of
    more than ``budget`` new tokens in all is checked on its first prompt only: that prompt's
    steps must be among the report's."""
    from dflash_lite.decoding.acceptance import SamplingParams
    from dflash_lite.decoding.baselines import NoDraftProposer
    from dflash_lite.decoding.decode import DFlashProposer, generate
    from dflash_lite.prompts import encode
    from dflash_lite.decoding.target import stop_token_ids

    env, rows = report["env"], report["methods"]
    fixed = [r for r in rows if r["kind"] == "dflash" and not r.get("compiled")
             and r.get("error") is None and r.get("tau") is not None]
    chosen = [r for r in fixed if r["block_size"] == block_size] or sorted(
        fixed, key=lambda r: r["block_size"])[-1:]
    if not chosen:
        chosen = [r for r in rows if r["kind"] == "autoregressive" and not r.get("compiled")
                  and r.get("error") is None and r.get("tau") is not None]
    assert chosen, "this report has no row that can be run again"
    row = chosen[0]
    n_new = int(env["max_new_tokens"])
    assert n_new > 0 and int(env["prompts"]) > 0, "not a report bench writes"
    target, tokenizer, drafter = _models(env, drafter_dir if row["kind"] == "dflash" else None)
    temperature = float(env.get("temperature") or 0.0)
    sampling = SamplingParams(temperature=temperature,
                              seed=env.get("seed") if temperature > 0 else None)
    stops = stop_token_ids(target, tokenizer)
    lengths = []
    texts = _report_prompts(env, prompts_path)
    whole = len(texts) * n_new <= budget
    for text in texts if whole else texts[:1]:
        ids = encode(tokenizer, text, bool(env.get("chat_template")))
        proposer = (DFlashProposer(drafter, target, row["block_size"]) if row["kind"] == "dflash"
                    else NoDraftProposer())
        with torch.inference_mode():
            lengths += generate(target, proposer, ids, n_new, sampling, stops).acceptance_lengths
    hist = [0] * max(lengths)
    for a in lengths:
        hist[a - 1] += 1
    tau = sum(lengths) / len(lengths)
    exact = str(env.get("device", "cpu")) == "cpu"
    if not whole:
        counts = list(row.get("tau_histogram") or [])
        assert sum(counts) and _close(row["tau"], sum(
            (i + 1) * c for i, c in enumerate(counts)) / sum(counts)), \
            f"{row['name']}: its tau is not the mean of its own histogram"
        assert not exact or len(hist) <= len(counts) and all(
            c <= counts[i] for i, c in enumerate(hist)), (
            f"{row['name']}: run again on the report's first prompt, its steps are not among the "
            "report's: this report was not measured by bench")
    elif exact:
        assert list(row.get("tau_histogram") or []) == hist and _close(row["tau"], tau), (
            f"{row['name']}: run again on the report's prompts it gives tau {tau:.3f}, not the "
            f"report's {row['tau']:.3f}: this report was not measured by bench")
    else:      # another device's arithmetic may flip a near tie: tau within 10%
        assert abs(row["tau"] - tau) <= 0.1 * tau, (
            f"{row['name']}: run again it gives tau {tau:.3f}, not the report's {row['tau']:.3f}")
    return row


def _genuine(report, block_size=None, **where) -> dict:
    assert isinstance(report, dict) and isinstance(report.get("env"), dict) \
        and isinstance(report.get("methods"), list), "not a bench report"
    _ratios(report)
    return _rerun_row(report, block_size, **where)


def ch06_report(ns: dict) -> None:
    _genuine(ns["report"], 16)


def ch06_code_report(ns: dict) -> None:
    report = ns["code_report"]
    source = str(report.get("env", {}).get("prompts_source", ""))
    assert source in ("built-in held-out code", "dataset humaneval", "dataset mbpp"), \
        "this report is not on the built-in code prompts: run bench with domain=\"code\""
    _genuine(report)


def ch06_own_report(ns: dict) -> None:
    report, path = ns["own_report"], Path(ns["own_file"])
    source = str(report.get("env", {}).get("prompts_source", ""))
    assert source and Path(source).resolve() == path.resolve(), \
        "this report was not run on your file: pass prompts=<that file> to bench"
    _genuine(report, prompts_path=path)


def ch08_exported_report(ns: dict) -> None:
    _genuine(ns["exported_report"], 16, drafter_dir=Path(ns["export_dir"]))


CHECKS.update(
    {
        "ch06_exercise_1_check": ch06_report,
        "ch06_exercise_2_check": ch06_report,
        "ch06_exercise_3_check": ch06_code_report,
        "ch06_exercise_4_check": ch06_own_report,
        "ch08_exercise_2_check": ch08_exported_report,
    }
)
