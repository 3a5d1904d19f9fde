"""Training drafters: target-regenerated data, the loss, the one training loop, tau probes.
Imports decoding, never measuring or the course."""
