"""A second opinion on a ``pytest``-mode grade from ``isolated`` mode.

In ``pytest`` mode the code under test runs in the test process: whatever a monitor records, it can
read the test's frames and sources, swap results or patch the framework in ways no audit event
shows. In ``isolated`` mode (``inside/runner.py``) the same tests run in a trusted process and the
workspace's code in another one, behind proxies: it reaches neither the test frames, nor the test
sources (emptied before it starts), nor the results, and an always-equal object compares by identity.
A cheat that makes a test pass in-process fails it there.

So the FAIL_TO_PASS tests and a deterministic sample of PASS_TO_PASS (``selected_tests``) run again,
isolated, in their own fresh container at the same time as the ``pytest``-mode run. Isolated mode
cannot run every real test (a ``conftest.py`` fixture, ``type(x) is``, a workspace object handed to
``json.dumps``): which ones it runs faithfully is learned once per task from the reference solution
(``tasks.grading.calibration``). ``apply_opinion`` then scores zero when a selected test that isolated
mode runs faithfully passes in ``pytest`` mode and not in isolated mode, and lists the selected tests it
could not run: never silently skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import secrets
import tarfile
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sandbox.base import SandboxError, SandboxSpec
from tasks.archive import tar_of_files
from tasks.collect import GRADER_INI, INSIDE_FILES, RESULT_PREFIX
from tasks.errors import TaskError
from tasks.grading.pytest_workspace import grading_workspace_tar, pristine_members
from tasks.testfiles import is_protected, is_test_side

if TYPE_CHECKING:
    from sandbox.base import SandboxBackend
    from sandbox.settings import SandboxLimits
    from tasks.grading.result import GradeResult
    from tasks.spec import Task

log = logging.getLogger(__name__)

GRADER_ROOT = "/tmp/grader"
PASS_TO_PASS_SAMPLE = 10
OUTPUT_CAP_BYTES = 16 * 1024 * 1024
MAX_CALL_TIMEOUT_S = 30.0
_HOST_TIMEOUT_MARGIN_S = 20.0


def selected_tests(task: Task) -> list[str]:
    """FAIL_TO_PASS, then up to ``PASS_TO_PASS_SAMPLE`` PASS_TO_PASS ids chosen by a hash of the id
    (the same for every grading of the task, so the calibration covers exactly them)."""
    sample = sorted(task.grading.pass_to_pass, key=lambda n: hashlib.sha256(n.encode()).hexdigest())
    return list(dict.fromkeys([*task.grading.fail_to_pass, *sample[:PASS_TO_PASS_SAMPLE]]))


def _test_side(task: Task, selected: list[str]) -> dict[str, bytes]:
    """The pristine test files the selected tests need, under ``tests/``: their files, and the other
    test-side ``.py`` files of their directories and the test packages above them (``__init__.py``,
    helpers). No ``conftest.py`` (isolated mode runs without), never the code under test."""
    files = {nodeid.split("::", 1)[0] for nodeid in selected}
    dirs = {f.rpartition("/")[0] for f in files}
    extra = task.protected_extra()
    out: dict[str, bytes] = {}
    for name, (info, data) in pristine_members(task).items():
        if not info.isfile() or data is None or not name.endswith(".py") or name.endswith("conftest.py"):
            continue
        folder = name.rpartition("/")[0]
        near = name in files or any(folder == d or (d and d.startswith(folder + "/")) for d in dirs)
        if (
            near
            and is_protected(name, extra)
            and (name in files or not name.rpartition("/")[2].startswith("test"))
        ):
            out[f"tests/{name}"] = data
    return out


def workspace_without_tests(task: Task, workspace_tar: bytes) -> bytes:
    """The graded workspace with every test module, helper and data file emptied: the worker runs the
    code under test, and a copy of the tests would tell it what they expect. The paths stay (empty),
    so a test package inside the code under test (``pkg/tests/__init__.py`` importing its siblings by
    absolute name) still imports."""
    graded = grading_workspace_tar(task, workspace_tar)
    extra = task.protected_extra()
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(graded)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src:
            if not is_test_side(member.name, extra):
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
            elif member.isdir():
                dst.addfile(member)
            elif member.isfile():
                member.size = 0
                dst.addfile(member, io.BytesIO(b""))
    return out.getvalue()


def bundle(task: Task, selected: list[str], nonce: str) -> bytes:
    """The trusted runner, its library, the grader's ini, the test files and a one-time config."""
    from tasks.grading.isolated import pristine_names

    config = {
        "nonce": nonce,
        "tests": [f"{GRADER_ROOT}/tests/{nodeid}" for nodeid in selected],
        "ini": f"{GRADER_ROOT}/pytest.ini",
        "rootdir": f"{GRADER_ROOT}/tests",
        "lib": f"{GRADER_ROOT}/lib",
        "workspace": "/workspace",
        "pristine": pristine_names(task.workspace_dir),
        "timeout_s": task.grading.timeout_s,
        "call_timeout_s": min(MAX_CALL_TIMEOUT_S, task.grading.timeout_s),
        "eager_workspace": True,
    }
    files: dict[str, bytes] = {
        **{name: source.read_bytes() for name, source in INSIDE_FILES.items()},
        "pytest.ini": GRADER_INI.encode(),
        "config.json": json.dumps(config).encode(),
        **_test_side(task, selected),
    }
    return tar_of_files(files)


@dataclass
class Opinion:
    """What isolated mode said about the selected tests."""

    selected: list[str]
    outcomes: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "selected": self.selected,
            "outcomes": self.outcomes,
            "problem": self.problem,
            "seconds": round(self.seconds, 3),
        }


def read_outcomes(output: str, nonce: str, selected: list[str]) -> tuple[dict[str, str], str | None]:
    """Per selected test, the runner's outcome (``missing`` when it never reported one)."""
    from tasks.grading.isolated import align, parse_runner_output

    report = parse_runner_output(output, nonce)
    if report.problems:
        return {n: "missing" for n in selected}, "malformed grader result"
    if report.summary is None:
        return {n: "missing" for n in selected}, "grader produced no result"
    names = align(selected, report.collected) if report.collected else {}
    if names is None:
        names = {n: n for n in report.collected}
    outcomes = {names.get(nodeid, nodeid): test["outcome"] for nodeid, test in report.tests.items()}
    problem = "timeout" if report.summary.get("timed_out") else None
    return {n: outcomes.get(n, "missing") for n in selected}, problem


async def isolated_opinion(
    backend: SandboxBackend,
    task: Task,
    workspace_tar: bytes,
    *,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> Opinion:
    """Run the selected tests in ``isolated`` mode over ``workspace_tar`` in a fresh container."""
    started = time.perf_counter()
    selected = selected_tests(task)
    nonce = secrets.token_hex(16)
    try:
        graded_tar = await asyncio.to_thread(workspace_without_tests, task, workspace_tar)
        staged = await asyncio.to_thread(bundle, task, selected, nonce)
    except TaskError as exc:
        return Opinion(selected, {n: "missing" for n in selected}, f"bad workspace archive: {exc}")
    run_limits = task.sandbox_limits(limits).model_copy(update={"output_cap_bytes": OUTPUT_CAP_BYTES})
    spec = SandboxSpec(image=task.resolved_image(image), limits=run_limits, workspace=graded_tar)
    sandbox = await backend.create(spec)
    try:
        staging = f".rlguard-opinion-{secrets.token_hex(8)}.tar"
        await sandbox.write_file(staging, staged)
        command = (
            f"mkdir -m 700 {GRADER_ROOT} && tar -x -f {staging} -C {GRADER_ROOT} && rm -f {staging} && "
            f"exec python3 -I -S -B {GRADER_ROOT}/runner.py {GRADER_ROOT}/config.json"
        )
        try:
            run = await sandbox.exec(command, timeout_s=task.grading.timeout_s + _HOST_TIMEOUT_MARGIN_S)
        except SandboxError as exc:
            return Opinion(selected, {n: "missing" for n in selected}, f"isolated run failed: {exc}")
    finally:
        try:
            await asyncio.shield(sandbox.destroy())
        except SandboxError:
            log.exception("could not destroy second-opinion sandbox %s", sandbox.id)
    if run.timed_out:
        return Opinion(selected, {n: "missing" for n in selected}, "timeout", time.perf_counter() - started)
    if run.truncated:
        return Opinion(selected, {n: "missing" for n in selected}, "output over the cap")
    outcomes, problem = await asyncio.to_thread(read_outcomes, run.output, nonce, selected)
    return Opinion(selected, outcomes, problem, time.perf_counter() - started)


def apply_opinion(
    task: Task, result: GradeResult, opinion: Opinion, runnable: frozenset[str] | None
) -> GradeResult:
    """``result`` with the second opinion applied (module docstring). ``runnable``: the selected tests
    isolated mode runs faithfully, from the task's calibration (None: not known, every selected
    test is listed and none decides)."""
    tests = result.details.get("tests") or {}
    if runnable is None:
        not_runnable = list(opinion.selected)
        disagree: list[str] = []
    else:
        not_runnable = [n for n in opinion.selected if n not in runnable]
        disagree = [
            n
            for n in opinion.selected
            if n in runnable and tests.get(n) == "passed" and opinion.outcomes.get(n) != "passed"
        ]
    summary = {
        **opinion.to_dict(),
        "calibrated": runnable is not None,
        "not_runnable": not_runnable,
        "disagree": disagree,
    }
    details = {**result.details, "second_opinion": summary}
    if disagree and result.reward > 0:
        details.update(
            graded_reward=result.reward,
            graded_reason=details.get("reason"),
            reason="second opinion disagrees",
            resolved=False,
        )
        return replace(result, reward=0.0, details=details)
    return replace(result, details=details)


__all__ = ["RESULT_PREFIX", "Opinion", "apply_opinion", "isolated_opinion", "selected_tests"]
