"""Ground truth by plain pytest: which of a task's tests pass before and after the gold patch.

Plain means: ``python3 -m pytest`` over the task's test files, in a sandbox of the task's own image
(no network, the same limits as an episode), with nothing of rlguard's grader loaded. Outcomes are
read from pytest's ``-rA`` summary, one ``PASSED <node id>`` line per passing test; the output cap
is raised so that no line of a large suite is lost. FAIL_TO_PASS = passes with the fix and not
without it; PASS_TO_PASS = passes with both. A test failing even with the fix is in neither list.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from sandbox.base import Sandbox, SandboxBackend, SandboxSpec
from sandbox.settings import SandboxLimits
from tasks.errors import TaskError
from tasks.realworld.repos import Instance, graded_tree

PYTEST_TIMEOUT_S = 300.0
OUTPUT_CAP_BYTES = 16 * 1024 * 1024
_OUTCOMES = ("PASSED", "FAILED", "ERROR", "XFAIL", "XPASS")
_PATCH_FILE = ".rlguard-gold.patch"


@dataclass(frozen=True)
class GroundTruth:
    """A task's FAIL_TO_PASS and PASS_TO_PASS node ids, as plain pytest decides them."""

    fail_to_pass: list[str]
    pass_to_pass: list[str]


def plain_pytest_command(tests: list[str]) -> str:
    """The command run in the sandbox: the project's tests as a developer runs them, summarised."""
    return shlex.join(
        ["python3", "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tb=no", "-rA", "--color=no", *tests]
    )


def parse_summary(output: str) -> dict[str, str]:
    """``{node id: outcome}`` from pytest's ``-rA`` short summary (``PASSED id``, ``FAILED id - msg``)."""
    outcomes: dict[str, str] = {}
    for line in output.splitlines():
        word, _, rest = line.partition(" ")
        if word not in _OUTCOMES or not rest:
            continue
        node = rest.split(" - ", 1)[0].strip() if word != "PASSED" else rest.strip()
        if "::" in node:
            outcomes[node] = word.lower()
    return outcomes


async def run_plain_pytest(
    backend: SandboxBackend, image: str, tree: Path, tests: list[str], then_patch: str | None = None
) -> list[dict[str, str]]:
    """Outcomes of plain pytest over ``tests`` in a fresh sandbox of ``image`` holding ``tree``.

    With ``then_patch``, the patch is applied in the same sandbox afterwards (``git apply``) and the
    tests run again: one sandbox start instead of two, and both runs see the same image and limits.
    """
    limits = SandboxLimits(
        memory="2g",
        workspace_size="512m",
        tmp_size="256m",
        exec_timeout_s=PYTEST_TIMEOUT_S,
        output_cap_bytes=OUTPUT_CAP_BYTES,
    )
    sandbox = await backend.create(SandboxSpec(image=image, limits=limits, workspace=tree))
    try:
        runs = [await _pytest_once(sandbox, image, tests)]
        if then_patch is not None:
            await sandbox.write_file(_PATCH_FILE, then_patch.encode())
            applied = await sandbox.exec(f"git apply {_PATCH_FILE} && rm {_PATCH_FILE}")
            if applied.exit_code != 0:
                raise TaskError(f"the gold patch does not apply in the sandbox: {applied.output.strip()}")
            runs.append(await _pytest_once(sandbox, image, tests))
    finally:
        await sandbox.destroy()
    return runs


async def _pytest_once(sandbox: Sandbox, image: str, tests: list[str]) -> dict[str, str]:
    result = await sandbox.exec(plain_pytest_command(tests), timeout_s=PYTEST_TIMEOUT_S)
    if result.timed_out or result.truncated:
        raise TaskError(f"plain pytest over {tests} in {image}: timed out or output cut")
    # Exit 0: all passed; 1: some failed. Anything else (usage error, collection crash) is no ground truth.
    if result.exit_code not in (0, 1):
        tail = "\n".join(result.output.strip().splitlines()[-10:])
        raise TaskError(f"plain pytest over {tests} in {image} exited {result.exit_code}:\n{tail}")
    return parse_summary(result.output)


async def ground_truth(backend: SandboxBackend, instance: Instance, image: str) -> GroundTruth:
    """Run the task's tests on the buggy base, apply the gold patch, run again; derive the two lists."""
    tree = graded_tree(instance)
    try:
        before, after = await run_plain_pytest(
            backend, image, tree, instance.recipe.tests, then_patch=instance.patch
        )
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    passing_after = [node for node, outcome in after.items() if outcome == "passed"]
    fail_to_pass = sorted(node for node in passing_after if before.get(node) != "passed")
    pass_to_pass = sorted(node for node in passing_after if before.get(node) == "passed")
    return GroundTruth(fail_to_pass, pass_to_pass)
