"""Benchmarks: each prints its figure beside a baseline measured in the same run."""
