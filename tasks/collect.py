"""Count hidden tests as pytest collects them, with the trusted grading runner, over the pristine task.

Why here and not in ``grading/``: loading a suite (``tasks.spec``) refuses hidden tests the grader
cannot run, and ``grading`` itself builds on ``tasks.spec``; this module needs neither. The runner
files it starts (and the grader ships into the container) live in ``grading/inside/``; they are
read as files, never imported here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from tasks.errors import TaskError
from tasks.safefiles import read_tree

log = logging.getLogger(__name__)

RESULT_PREFIX = "RLGUARD-GRADE"
COLLECT_TIMEOUT_S = 120.0

_INSIDE = Path(__file__).resolve().parent / "grading" / "inside"
# What runs in the grading container: its path under GRADER_ROOT -> its source in ``inside/``. The
# files import each other by these module names (``grading_wire``, ``grading_remote``, ...).
INSIDE_FILES: dict[str, Path] = {
    "runner.py": _INSIDE / "runner.py",
    "lib/rlguard_checks.py": _INSIDE / "checks.py",
    "lib/grading_remote.py": _INSIDE / "remote.py",
    "lib/grading_proxies.py": _INSIDE / "proxies.py",
    "lib/grading_import_hook.py": _INSIDE / "import_hook.py",
    "lib/grading_wire.py": _INSIDE / "wire.py",
    "lib/grading_worker.py": _INSIDE / "worker.py",
}
GRADER_INI = """\
[pytest]
addopts =
python_files = test_*.py
python_classes = Test*
python_functions = test_*
xfail_strict = true
"""


# ------------------------------------------------------------------------------ expected tests
_COLLECTED: dict[str, list[str]] = {}


def hidden_files(hidden_dir: Path) -> dict[str, bytes]:
    """``hidden/`` as the grader's ``tests/`` files: regular files only, never read through a link."""
    return {f"tests/{name}": data for name, data in read_tree(hidden_dir).items()}


def _collect_key(hidden: dict[str, bytes], workspace_dir: Path | None) -> str:
    digest = hashlib.sha256()
    for source in INSIDE_FILES.values():
        digest.update(source.read_bytes())
    digest.update(GRADER_INI.encode())
    for name, data in hidden.items():
        digest.update(f"{name}\0{len(data)}\0".encode() + data)
    if workspace_dir is not None:  # the names it serves decide which imports are proxies
        for root in (workspace_dir / "src", workspace_dir):
            if root.is_dir():
                digest.update(("\0".join(sorted(os.listdir(root))) + "\1").encode())
    return digest.hexdigest()


def _cache_file(key: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "rlguard" / "collected-tests" / f"{key}.json"


def expected_test_ids(hidden_dir: Path, workspace_dir: Path | None = None) -> list[str]:
    """Node ids of every hidden test, as ``pytest --collect-only`` counts them over the pristine files.

    The trusted runner itself collects, on the host, in the grader's layout (its ini, rootdir, no
    conftest) with the pristine workspace's modules as lazy references, so parametrized tests,
    ``unittest.TestCase`` classes of any name and inherited test methods count exactly as they
    will run. Nothing of the workspace runs. Hidden tests that cannot be collected that way
    (a collection error, workspace code called at import, a test class deriving from a workspace
    class) are refused here with pytest's own message. Cached by content (memory and disk).
    """
    hidden = hidden_files(hidden_dir)
    if not any(PurePosixPath(name).name.startswith("test_") for name in hidden):
        raise TaskError(f"{hidden_dir}: no hidden tests found")
    key = _collect_key(hidden, workspace_dir)
    if key in _COLLECTED:
        return list(_COLLECTED[key])
    cache = _cache_file(key)
    try:
        ids = json.loads(cache.read_text())
    except (OSError, ValueError):
        ids = None
    if not (isinstance(ids, list) and ids and all(isinstance(i, str) for i in ids)):
        ids = _collect(hidden_dir, hidden, workspace_dir)
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(ids))
        except OSError:
            log.warning("cannot cache collected hidden tests in %s", cache)
    _COLLECTED[key] = ids
    return list(ids)


def _collect(hidden_dir: Path, hidden: dict[str, bytes], workspace_dir: Path | None) -> list[str]:
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="rlguard-collect-") as tmp:
        root = Path(tmp)
        empty_workspace = root / "no-workspace"
        empty_workspace.mkdir()
        config = {
            "nonce": nonce,
            "collect_only": True,
            "tests": [str(root / "tests")],
            "ini": str(root / "pytest.ini"),
            "rootdir": str(root / "tests"),
            "lib": str(root / "lib"),
            "workspace": str(workspace_dir or empty_workspace),
            "timeout_s": COLLECT_TIMEOUT_S,
        }
        files = {
            **{name: source.read_bytes() for name, source in INSIDE_FILES.items()},
            "pytest.ini": GRADER_INI.encode(),
            "config.json": json.dumps(config).encode(),
            **hidden,
        }
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        try:
            run = subprocess.run(
                [sys.executable, "-I", "-S", "-B", str(root / "runner.py"), str(root / "config.json")],
                capture_output=True,
                timeout=COLLECT_TIMEOUT_S,
                cwd=tmp,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            )
        except subprocess.TimeoutExpired:
            raise TaskError(f"{hidden_dir}: counting hidden tests took too long") from None
    output = run.stdout.decode("utf-8", "replace")
    marker = f"{RESULT_PREFIX} {nonce} "
    ids: list[str] = []
    summary: dict[str, Any] | None = None
    for line in output.splitlines():
        if line.startswith(marker):
            record = json.loads(line[len(marker) :])
            if record.get("kind") == "collected":
                ids.append(record["id"])
            elif record.get("kind") == "summary":
                summary = record
    if summary is None:
        tail = (output + run.stderr.decode("utf-8", "replace"))[-1500:]
        raise TaskError(f"{hidden_dir}: could not count the hidden tests: {tail}")
    if summary.get("collect_errors") or summary.get("exitstatus") not in (0, 5):
        errors = "; ".join(f"{nodeid}: {text}" for nodeid, text in summary.get("collect_errors") or [])
        detail = errors or str(summary.get("pytest_tail", ""))[-1000:]
        raise TaskError(f"{hidden_dir}: hidden tests are not supported by isolated grading: {detail}")
    if not ids:
        raise TaskError(f"{hidden_dir}: no hidden tests found")
    if len(set(ids)) != len(ids):
        raise TaskError(f"{hidden_dir}: hidden tests with duplicate node ids")
    return ids
