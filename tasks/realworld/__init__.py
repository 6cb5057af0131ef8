"""Recipes of the real-world suite: pinned PyPI sdists, one bug patch per task, built by
``rlguard tasks build realworld`` (``build``) into SWE-bench-format rows and imported."""
