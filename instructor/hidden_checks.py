"""Hidden checks: run by the grader (dflash_lite/grader.py) after a graded cell's own check
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
    from dflash_lite.acceptance import SamplingParams, target_probs

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
    from dflash_lite.decode import generate
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
                drafts.append(torch.as_tensor(proposer.propose(last, size - 1)[0]).cpu())
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
SOLUTION_KEY = "__dflash_solution__"  # dflash_lite.grader.SOLUTION_KEY


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
    from dflash_lite.drafter import DFlashDrafter

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
    from dflash_lite.target import context_features

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
    from dflash_lite.train import loss_gamma, position_weights

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
    from dflash_lite.train import drafter_loss as real

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
    from dflash_lite.tree import DraftTree

    parents, depths = [-1], [0]
    for i in range(1, size):
        p = int(torch.randint(max(0, i - 4), i, (1,), generator=g))  # deep and bushy
        parents.append(p)
        depths.append(depths[p] + 1)
    return DraftTree(torch.randint(0, 100, (size,), generator=g), parents, depths)


def ch09_tree_mask(ns: dict) -> None:
    from dflash_lite.tree import build_tree

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
    from dflash_lite.tree import build_tree

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
    from dflash_lite.cache import SlotCache

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
