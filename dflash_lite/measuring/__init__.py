"""Measuring: the interleaved harness, the benchmark's methods and reports, the batch sweep,
model cards and the figures. Imports decoding and training, never the course."""
