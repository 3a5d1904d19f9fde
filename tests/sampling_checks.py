"""A check two test files share: sampled sequences follow the target's exact distribution."""
import numpy as np
from scipy.stats import chisquare


def assert_samples_follow(exact: dict, results) -> None:
    """``results`` (GenerationResults of one short sampled request, repeated) hold only sequences
    the target can produce, with the frequencies of ``exact`` (sequence -> probability) under a
    chi-square test (rare cells pooled, so the test holds), and their first step both rejected
    (1 token) and accepted (2) a draft often enough for the test to mean something."""
    counts, first_step = dict.fromkeys(exact, 0), []
    for result in results:
        assert tuple(result.tokens) in counts, "a token sequence the target cannot produce"
        counts[tuple(result.tokens)] += 1
        first_step.append(result.acceptance_lengths[0])          # 1: the draft was rejected, 2: accepted
    runs = len(first_step)
    assert first_step.count(1) > runs // 20 and first_step.count(2) > runs // 20
    keys = sorted(exact)
    expected = np.array([exact[k] for k in keys]) * runs
    observed = np.array([counts[k] for k in keys])
    rare = expected < 5
    expected = np.append(expected[~rare], expected[rare].sum())
    observed = np.append(observed[~rare], observed[rare].sum())
    assert chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 0.01
