"""Benchmarks: `invoke bench [--quick]` (bench/run.py) writes bench/results.json and docs/BENCHMARKS.md."""
