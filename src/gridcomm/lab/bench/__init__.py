"""Benchmarks: every figure beside its ceiling and its peers, measured in the same run (JSON + plots)."""
