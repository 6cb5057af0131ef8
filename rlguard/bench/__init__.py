"""Benchmarks of the composed stack (gateway round trip, rollout through a gateway, MCP vs HTTP).

Each returns its numbers as a flat dict; ``rlguard bench <name>`` prints them. The benchmarks of
a single package live beside it (``sandbox/bench.py``, ``guard/bench.py``, ``trainer/bench/``).
"""
