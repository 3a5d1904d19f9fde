"""Self-checks for notebook 11, batching and serving."""
from __future__ import annotations

from collections import Counter

from ..decoding.cache import SlotCache
from . import attempt, correct


def _cache_at(write_positions) -> SlotCache:
    """A cache of rows at ``write_positions`` (one row through two: a single row takes the cache's
    one-request path, which may return no mask at all)."""
    rows = list(map(int, write_positions))
    cache = SlotCache(1, rows=max(2, len(rows)))
    cache.rewind(rows if len(rows) > 1 else rows * 2)
    return cache


def package_verify_mask(write_positions, ancestors):
    """The package's ``batch_verify_mask(write_positions, ancestors)`` (``SlotCache.verify_mask``
    of rows at those write positions), for the demonstrations while yours is not done."""
    mask = _cache_at(write_positions).verify_mask(ancestors.shape[0], ancestors)["full_attention"]
    return mask[: len(write_positions)]


def package_positions(write_positions, depths):
    """The package's ``batch_positions(write_positions, depths)`` (``SlotCache.positions``)."""
    return _cache_at(write_positions).positions(len(depths), depths)[: len(write_positions)]


@attempt("Exercise 1", "Give the number of visible pairs, an int.")
def check_visible_pairs(answer, write_positions: list[int], width: int) -> bool:
    """Exercise 1: the (query, key) pairs a chain verify of ``width`` tokens may attend to, summed
    over the rows of a batch at ``write_positions``."""
    cache = SlotCache(1, rows=len(write_positions))
    cache.rewind(list(write_positions))
    expected = int(cache.verify_mask(width)["full_attention"].sum())
    assert int(answer) == expected, ("not the number of True entries of the batch's verify mask "
                                     "(each row: its committed slots, then the causal triangle)")
    one_offset = len(write_positions) * (width * max(write_positions) + width * (width + 1) // 2)
    return correct("Exercise 1", f"{expected} pairs; with every row advanced to the batch's "
                                 f"longest it would be {one_offset}, the difference being slots "
                                 "a row must never see.")


def expected_minimum(lengths: list[int], rows: int) -> float:
    """E[min of ``rows`` independent draws] from the empirical distribution of ``lengths``:
    the sum over k >= 1 of P(X >= k) ** rows."""
    counts, n = Counter(int(x) for x in lengths), len(lengths)
    return sum((sum(c for v, c in counts.items() if v >= k) / n) ** rows
               for k in range(1, max(counts) + 1))


@attempt("Exercise 2", "Give the expected tokens per step, a float.")
def check_naive_tau(answer, lengths: list[int], rows: int) -> bool:
    """Exercise 2: the naive rollback's expected tokens per step at ``rows`` rows, if each row's
    accepted length were an independent draw from ``lengths`` (the rows decoded alone)."""
    assert lengths, "no acceptance lengths were given"
    expected = expected_minimum(lengths, rows)
    assert abs(float(answer) - expected) < 0.01 * expected, (
        "not E[min of the rows' accepted lengths]: every row commits the shortest row's length "
        "(hint: E[min] = sum over k >= 1 of P(X >= k) ** rows)")
    alone = sum(lengths) / len(lengths)
    return correct("Exercise 2", f"{expected:.2f} tokens per step at {rows} rows, against "
                                 f"{alone:.2f} alone: the minimum of several draws sits in the "
                                 "lower tail.")


@attempt("Exercise 3", "Give the break-even tau, a float.")
def check_break_even_tau(answer, costs: dict, rows: int, block_size: int) -> bool:
    """Exercise 3: the tau at which DFlash at ``block_size`` only matches plain decoding at batch
    ``rows``, from the measured costs ``costs[rows]`` ({"t_target": {w: s}, "t_draft": {w: s}})."""
    t, d = costs[rows]["t_target"], costs[rows]["t_draft"]
    expected = (t[block_size] + d[block_size]) / t[1]
    assert abs(float(answer) - expected) < 0.01 * expected, (
        "not the tau at which tau * t(b, 1) / (t(b, B) + t_draft(b, B)) equals 1")
    return correct("Exercise 3", f"tau {expected:.2f}: below it, DFlash B={block_size} is slower "
                                 f"than plain decoding at batch {rows} on this machine.")

