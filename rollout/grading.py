"""Tamper-proof grading: the final workspace and the pristine hidden tests meet in a fresh sandbox.

Why each step exists:

* **fresh sandbox** — nothing the agent started (daemons, files in /tmp) survives into grading;
* **visible tests restored** (``grading.restore``, default ``tests``) — deleted, emptied or weakened
  test files come back from the pristine task copy before anything runs;
* **hidden tests only now** — they enter a container for the first time, after the agent is done;
* **hardened pytest** (``rollout/grading_runner.py``) — isolated interpreter, the grader's own ini,
  no conftest, no plugin autoload, workspace importable only after collection, watched pytest
  internals; workspace ``conftest.py``/``pytest.ini``/``sitecustomize``/``.pth`` never load;
* **three sources must agree** — the JUnit XML, the runner's event stream and the list of hidden
  tests counted here from the pristine files (AST). A test passes only when all of them say so;
  missing results count as failures; extra results, tampering or a timeout score zero;
* **the grading container is destroyed** in every case, errors included.
"""

from __future__ import annotations

import ast
import asyncio
import io
import json
import logging
import re
import secrets
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from rlguard.errors import RlguardError
from rollout.tasks import Task
from sandbox.base import SandboxBackend, SandboxError, SandboxSpec
from sandbox.settings import SandboxLimits

log = logging.getLogger(__name__)

GRADER_ROOT = "/tmp/grader"
WORKSPACE = "/workspace"
RESULT_PREFIX = "RLGUARD-GRADE"
MAX_GRADING_WORKSPACE_BYTES = 256 * 1024 * 1024
# Beyond the runner's own timeout: interpreter start, JUnit parsing and the answer's way back.
_HOST_TIMEOUT_MARGIN_S = 20.0
_HERE = Path(__file__).resolve().parent
_GRADER_INI = """\
[pytest]
addopts =
python_files = test_*.py
python_classes = Test*
python_functions = test_*
junit_family = xunit2
junit_logging = no
xfail_strict = true
"""


@dataclass(frozen=True)
class GradeResult:
    """The reward and the per-test evidence behind it (``details`` is JSON-serialisable)."""

    reward: float
    passed: int
    failed: int
    errors: int
    total: int
    details: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------ expected tests
def _parametrized(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    return any("parametrize" in ast.unparse(decorator) for decorator in node.decorator_list)


def expected_test_ids(hidden_dir: Path) -> list[str]:
    """Node ids of every hidden test, counted from the pristine files without running them.

    Plain ``test_*`` functions and ``test_*`` methods of ``Test*`` classes in ``test_*.py`` files,
    the same rules as the grader's ini. Parametrized tests would need pytest to count them, so they
    are refused: a task author learns it here instead of from a silently wrong reward.
    """
    ids: list[str] = []
    for path in sorted(hidden_dir.rglob("test_*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(hidden_dir).as_posix()
        try:
            module = ast.parse(path.read_text(), filename=str(path))
        except SyntaxError as exc:
            raise RlguardError(f"{path}: hidden test file does not parse: {exc}") from exc
        names: dict[str, None] = {}
        for node in module.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                if _parametrized(node):
                    raise RlguardError(f"{path}: {node.name}: parametrized hidden tests are not supported")
                names[f"{rel}::{node.name}"] = None
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                if _parametrized(node):
                    raise RlguardError(f"{path}: {node.name}: parametrized hidden tests are not supported")
                for item in node.body:
                    is_function = isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                    if is_function and item.name.startswith("test"):
                        if _parametrized(item):
                            raise RlguardError(
                                f"{path}: {item.name}: parametrized hidden tests are not supported"
                            )
                        names[f"{rel}::{node.name}::{item.name}"] = None
        ids.extend(names)
    if not ids:
        raise RlguardError(f"{hidden_dir}: no hidden tests found")
    return ids


def junit_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) that pytest's JUnit XML writes for ``nodeid`` (``mangle_test_address``)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


# ------------------------------------------------------------------------------------ archives
def _under(name: str, prefixes: list[str]) -> bool:
    return any(name == prefix or name.startswith(prefix + "/") for prefix in prefixes)


def _clean_name(name: str) -> str | None:
    """A member name relative to /workspace, or None when it points outside it."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        return None
    parts = [part for part in path.parts if part != "."]
    return "/".join(parts) or None


def grading_workspace_tar(task: Task, final_workspace_tar: bytes) -> bytes:
    """The agent's final workspace with the task's ``grading.restore`` paths put back as shipped."""
    restore = [p.strip("/") for p in task.grading.restore]
    out = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=out, mode="w") as dst:
        try:
            src = tarfile.open(fileobj=io.BytesIO(final_workspace_tar))  # noqa: SIM115 (closed below)
        except tarfile.TarError as exc:
            raise RlguardError(f"final workspace is not a tar archive: {exc}") from exc
        with src:
            for member in src:
                name = _clean_name(member.name)
                if name is None or _under(name, restore):
                    continue
                if not (member.isfile() or member.isdir() or member.issym()):
                    continue  # devices, fifos and hard links have no business in a graded workspace
                total += member.size
                if total > MAX_GRADING_WORKSPACE_BYTES:
                    raise RlguardError(f"final workspace is over {MAX_GRADING_WORKSPACE_BYTES} bytes")
                member.name = name
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        with tarfile.open(fileobj=io.BytesIO(task.workspace_tar())) as pristine:
            for member in pristine:
                name = _clean_name(member.name)
                if name is not None and _under(name, restore):
                    dst.addfile(member, pristine.extractfile(member) if member.isfile() else None)
    return out.getvalue()


def _grader_test_path(arg: str) -> str:
    return f"{GRADER_ROOT}/tests" + arg.removeprefix("/grader")


def grader_bundle(task: Task, nonce: str) -> bytes:
    """What goes to ``/tmp/grader``: runner, ini, the exact-compare helper, hidden tests, config."""
    config = {
        "nonce": nonce,
        "tests": [_grader_test_path(arg) for arg in task.grading.command[1:] or ["/grader"]],
        "ini": f"{GRADER_ROOT}/pytest.ini",
        "rootdir": f"{GRADER_ROOT}/tests",
        "lib": f"{GRADER_ROOT}/lib",
        "workspace": WORKSPACE,
        "timeout_s": task.grading.timeout_s,
    }
    files: dict[str, bytes] = {
        "runner.py": (_HERE / "grading_runner.py").read_bytes(),
        "pytest.ini": _GRADER_INI.encode(),
        "lib/rlguard_checks.py": (_HERE / "grading_checks.py").read_bytes(),
        "config.json": json.dumps(config).encode(),
    }
    for path in sorted(task.hidden_dir.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[f"tests/{path.relative_to(task.hidden_dir).as_posix()}"] = path.read_bytes()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1704067200
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


# ------------------------------------------------------------------------------------- scoring
def parse_runner_output(output: str, nonce: str) -> dict[str, Any] | None:
    """The runner's result line carrying this grading's nonce (lines without it are forgeries)."""
    marker = f"{RESULT_PREFIX} {nonce} "
    for line in reversed(output.splitlines()):
        if line.startswith(marker):
            try:
                result = json.loads(line[len(marker) :])
            except ValueError:
                return None
            return result if isinstance(result, dict) else None
    return None


def _zero(task: Task, total: int, reason: str, **details: Any) -> GradeResult:
    return GradeResult(0.0, 0, total, 0, total, {"task": task.id, "reason": reason, **details})


def score(task: Task, expected: list[str], result: dict[str, Any] | None, output: str = "") -> GradeResult:
    """Reward from the runner's result, trusting a test's pass only when every source agrees."""
    try:
        return _score(task, expected, result, output)
    except (TypeError, ValueError, AttributeError, IndexError, KeyError) as exc:
        # The event stream passes through a pipe workspace code can write to: garbage scores zero.
        return _zero(task, len(expected), "malformed grader result", error=f"{type(exc).__name__}: {exc}")


def _score(task: Task, expected: list[str], result: dict[str, Any] | None, output: str) -> GradeResult:
    total = len(expected)
    if result is None:
        return _zero(task, total, "grader produced no result", output_tail=output[-2000:])
    if result.get("timed_out"):
        return _zero(task, total, "timeout", timeout_s=task.grading.timeout_s)
    events = result.get("events") or {}
    junit_cases = result.get("junit")
    junit: dict[tuple[str, str], list[str]] = {}
    for case in junit_cases or []:
        junit.setdefault((str(case[0]), str(case[1])), []).append(str(case[2]))
    reports: dict[str, dict[str, list[Any]]] = events.get("reports") or {}
    calls: dict[str, list[bool]] = events.get("calls") or {}
    expected_keys = {junit_key(nodeid) for nodeid in expected}
    anomalies = list(events.get("anomalies") or [])
    extra_junit = sorted(f"{c}::{n}" for c, n in junit if (c, n) not in expected_keys)
    extra_reports = sorted(set(reports) - set(expected))
    collected = events.get("collected")
    if extra_junit:
        anomalies.append(f"JUnit XML has tests that are not hidden tests: {extra_junit[:10]}")
    if extra_reports:
        anomalies.append(f"event stream has tests that are not hidden tests: {extra_reports[:10]}")
    if collected is not None and sorted(collected) != sorted(expected):
        anomalies.append("collected tests differ from the hidden tests counted on the host")

    outcomes: dict[str, str] = {}
    passed = failed = errors = 0
    for nodeid in expected:
        in_junit = junit.get(junit_key(nodeid), [])
        phases = reports.get(nodeid, {})
        setup = (phases.get("setup") or [None])[0]
        call = (phases.get("call") or [None])[0]
        teardown = (phases.get("teardown") or [None])[0]
        if setup == "failed" or in_junit == ["error"]:
            outcome = "error"
        elif (
            in_junit == ["passed"]
            and (setup, call, teardown) == ("passed",) * 3
            and calls.get(nodeid) == [False]
        ):
            outcome = "passed"
        elif not in_junit or call is None:
            outcome = "missing"
        else:
            outcome = "failed"
        outcomes[nodeid] = outcome
        passed += outcome == "passed"
        errors += outcome == "error"
        failed += outcome in ("failed", "missing")

    tamper = list(events.get("tamper") or [])
    details: dict[str, Any] = {
        "task": task.id,
        "tests": outcomes,
        "returncode": result.get("returncode"),
        "pytest_exitstatus": events.get("finish"),
        "junit_error": result.get("junit_error"),
        "collect_errors": events.get("collect_errors") or [],
        "messages": {
            nodeid: (phases.get("call") or phases.get("setup") or [None, ""])[1]
            for nodeid, phases in reports.items()
            if nodeid in outcomes and outcomes[nodeid] != "passed"
        },
        "output_tail": str(result.get("output_tail", ""))[-2000:],
    }
    if tamper:
        return GradeResult(
            0.0, 0, total - errors, errors, total, {**details, "reason": "tampering", "tamper": tamper}
        )
    if anomalies:
        return GradeResult(
            0.0,
            0,
            total - errors,
            errors,
            total,
            {**details, "reason": "inconsistent results", "anomalies": anomalies},
        )
    all_passed = 1.0 if passed == total else 0.0
    reward = all_passed if task.grading.reward == "all_or_nothing" else passed / total
    # A run that never reached pytest's session end (exit tricks, crashes) keeps only the results it
    # proved; the reason says so.
    reason = "graded" if events.get("finish") is not None else "incomplete run"
    return GradeResult(reward, passed, failed, errors, total, {**details, "reason": reason})


# ------------------------------------------------------------------------------------- grading
async def grade(
    backend: SandboxBackend, task: Task, workspace_tar: bytes, *, limits: SandboxLimits | None = None
) -> GradeResult:
    """Grade ``workspace_tar`` (the agent's final /workspace) with ``task``'s hidden tests.

    ``limits`` are the base sandbox limits the task's overrides apply to (default: the settings').

    Never raises for anything the agent controls: a broken workspace, a crash, a hang or tampering
    all come back as a low reward with the reason in ``details``. Infrastructure failures (no engine,
    no image) raise ``SandboxError`` so the caller can retry instead of recording a wrong reward.
    """
    started = time.perf_counter()
    expected = expected_test_ids(task.hidden_dir)
    try:
        graded_tar = grading_workspace_tar(task, workspace_tar)
    except RlguardError as exc:
        return _zero(task, len(expected), "bad workspace archive", error=str(exc))
    nonce = secrets.token_hex(16)
    bundle = grader_bundle(task, nonce)
    spec = SandboxSpec(
        image=task.resolved_image(), limits=task.sandbox_limits(limits), episode_id=None, workspace=graded_tar
    )
    timings: dict[str, float] = {}
    sandbox = await backend.create(spec)
    timings["create_s"] = round(time.perf_counter() - started, 3)
    try:
        result = await _run_in(sandbox, task, bundle, timings)
    finally:
        try:
            await asyncio.shield(sandbox.destroy())
        except SandboxError:
            log.exception("could not destroy grading sandbox %s", sandbox.id)
    if result is None:
        graded = _zero(task, len(expected), "timeout", timeout_s=task.grading.timeout_s)
    else:
        graded = score(task, expected, parse_runner_output(result, nonce), result)
    graded.details["timings"] = {**timings, "total_s": round(time.perf_counter() - started, 3)}
    return graded


async def _run_in(sandbox: Any, task: Task, bundle: bytes, timings: dict[str, float]) -> str | None:
    """Put the grader bundle in place and run it; the runner's output, or None on a host timeout."""
    staging = f".rlguard-grader-{secrets.token_hex(8)}.tar"
    await sandbox.write_file(staging, bundle)
    unpack = await sandbox.exec(
        f"mkdir -m 700 {GRADER_ROOT} && tar -x -f {staging} -C {GRADER_ROOT} && rm -f {staging}", timeout_s=30
    )
    timings["unpack_s"] = round(unpack.duration_ms / 1000, 3)
    if unpack.exit_code != 0:
        raise SandboxError(f"could not unpack the grader in the grading sandbox: {unpack.output[-500:]}")
    try:
        run = await sandbox.exec(
            f"exec python3 -I -B {GRADER_ROOT}/runner.py parent {GRADER_ROOT}/config.json",
            timeout_s=task.grading.timeout_s + _HOST_TIMEOUT_MARGIN_S,
        )
    except SandboxError as exc:
        # Workspace code runs from here on and can break the sandbox's command channel: its fault.
        return f"grader run failed: {exc}"
    timings["run_s"] = round(run.duration_ms / 1000, 3)
    if run.timed_out:
        return None
    return run.output
