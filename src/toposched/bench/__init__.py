"""Benchmark scenarios shared by `toposched bench` and the pytest-benchmark suite."""
