"""The models and the lossless loop: the target and its taps, the one cache, the drafter, the
proposers, the decode loop, trees, prompt lookup, the cost-aware policy and ``Engine``. Nothing
here imports from the training, measuring or course layers."""
