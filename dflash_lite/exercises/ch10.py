"""Self-checks for notebook 10, GPU benchmarks."""
from __future__ import annotations

from . import attempt, correct

H200_BANDWIDTH = 4.8e12          # bytes per second


@attempt("Exercise 1", "Give the time in milliseconds, as a float.")
def check_bandwidth_floor(answer, probe: dict) -> bool:
    """Exercise 1: ms to read the bf16 weights of the probed target once at the H200's bandwidth."""
    expected = 1e3 * probe["params_target_B"] * 1e9 * 2 / H200_BANDWIDTH
    assert abs(float(answer) - expected) < 0.01 * expected, \
        "not the time to read the bf16 weights once at the H200's bandwidth, in milliseconds"
    measured = probe["t_target_ms"]["1"]
    return correct("Exercise 1", f"{expected:.2f} ms; the eager forward measured "
                                 f"{measured:.1f} ms, {measured / expected:.1f}x the floor.")


@attempt("Exercise 2", "Give tau as a float.")
def check_tau_for_speedup(answer, probe: dict, speedup: float) -> bool:
    """Exercise 2: tau at which tau * t(1) / (t(16) + t_draft(16)) equals ``speedup``."""
    t = probe["t_target_ms"]
    expected = speedup * (t["16"] + probe["t_draft_ms"]["16"]) / t["1"]
    assert abs(float(answer) - expected) < 0.01 * expected, \
        "not the tau at which the cost model gives this speedup"
    return correct("Exercise 2",
                   f"tau {expected:.2f}: the paper's drafter reaches 6.49 on average.")


@attempt("Exercise 3", "Give the speedup as a float.")
def check_graphs_speedup(answer, row: dict, verify_ms: dict) -> bool:
    """Exercise 3: the cost model with both forwards faster by the verify's eager / graphs ratio and
    the per-step overhead unchanged, for DFlash and for plain decoding alike."""
    r = verify_ms["eager"] / verify_ms["reduce-overhead"]
    o = row["overhead_per_step_s"]
    expected = (row["tau"] * (row["t_target_1"] / r + o)
                / ((row["t_target_b"] + row["t_draft_b"]) / r + o))
    assert abs(float(answer) - expected) < 0.01 * expected, (
        "not the cost model's speedup with both forwards faster by the verify's ratio and the "
        "overhead unchanged")
    return correct("Exercise 3", f"{expected:.2f}x: once the forwards are cheap, the loop's own "
                                 "overhead decides, so it must go on the device too "
                                 "(the static path).")
