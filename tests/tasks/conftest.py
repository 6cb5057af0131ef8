"""Fixtures for the tasks tests: SWE-bench-format rows from a real PyPI project, built once."""

from pathlib import Path

import pytest

from tasks.minisuite import build_rows


@pytest.fixture(scope="session")
def rows_and_repos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(rows.jsonl, repos dir)``: inflection 0.5.1 with two injected regressions (tasks.minisuite)."""
    return build_rows(tmp_path_factory.mktemp("swebench"))


@pytest.fixture(scope="session")
def mini_suite(rows_and_repos: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rows imported as a suite directory."""
    from tasks.swebench import import_swebench

    out = tmp_path_factory.mktemp("suites") / "mini"
    import_swebench(*rows_and_repos, out)
    return out
