"""Plain pytest in a container of the task's image: the yardstick ``pytest`` mode is measured against.

``rlguard tasks check``'s ground truth, the tests' "outcomes equal plain pytest's", and
``rlguard bench grading``'s denominator all come from here: ``python3 -m pytest`` from the
repository root over the same test files, the project's config and the image's plugins as they
are, per-test outcomes read from pytest's own junit XML (written outside /workspace).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import shlex
import time
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from sandbox.base import SandboxError, SandboxSpec
from tasks.grading.pytest_mode import REPORT_CAP_BYTES

if TYPE_CHECKING:
    from sandbox.base import SandboxBackend
    from sandbox.settings import SandboxLimits
    from tasks.spec import Task

_MARKER = "RLGUARD-PLAIN-JUNIT"


def _module_file(classname: str, files: list[str]) -> str | None:
    """The test file a junit ``classname`` starts with (``tests.test_ttl.TTLCacheTest`` ->
    ``tests/test_ttl.py``), among ``files``."""
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        candidate = "/".join(parts[:i]) + ".py"
        if candidate in files:
            return candidate
    return None


def junit_outcomes(xml_text: str, files: list[str] | None = None) -> dict[str, str]:
    """``{nodeid: passed|failed|error|skipped}`` from pytest's junit XML (file-based test ids).

    A test method a class inherits from another file (a mixin in ``tests/__init__.py``) is reported
    with that file; its node id is the collecting file's, found from ``classname`` among ``files``."""
    outcomes: dict[str, str] = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        file = case.get("file") or ""
        classname, name = case.get("classname", ""), case.get("name", "")
        module = file[:-3].replace("/", ".") if file.endswith(".py") else ""
        if files and not (module and (classname == module or classname.startswith(module + "."))):
            found = _module_file(classname, files)
            if found is not None:
                file, module = found, found[:-3].replace("/", ".")
        inner = classname[len(module) + 1 :] if module and classname.startswith(module + ".") else ""
        nodeid = "::".join([file, *(inner.split(".") if inner else []), name])
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            outcome = "failed"
        elif "error" in kinds:
            outcome = "error"
        elif "skipped" in kinds:
            outcome = "skipped"
        else:
            outcome = "passed"
        outcomes[nodeid] = outcome
    return outcomes


def plain_command(task: Task, junit: bool) -> str:
    """The shell command a developer would type (plus the junit report when outcomes are wanted)."""
    paths = ":".join(["/workspace", *(f"/workspace/{p}" for p in task.grading.pythonpath)])
    files = " ".join(shlex.quote(f) for f in task.test_files())
    report = "-o junit_family=xunit1 --junitxml=/tmp/plain-junit.xml " if junit else ""
    run = (
        f"cd /workspace && PYTHONPATH={paths} timeout -k 5 {task.grading.timeout_s:g} "
        f"python3 -m pytest -q -p no:cacheprovider --rootdir /workspace {report}{files} > /tmp/plain.log 2>&1"
    )
    if not junit:
        return f"{run}; echo rc=$?"
    return f"{run}; printf '\\n{_MARKER} '; gzip -c /tmp/plain-junit.xml 2>/dev/null | base64 -w0; echo"


async def plain_pytest(
    backend: SandboxBackend,
    task: Task,
    workspace_tar: bytes,
    *,
    junit: bool = True,
    image: str = "",
    limits: SandboxLimits | None = None,
) -> tuple[dict[str, str], float]:
    """``(outcomes by node id, wall seconds)`` of plain pytest in a fresh container over the workspace.

    The time counts what grading counts: starting the container with the workspace, the run,
    and removing the container.
    """
    started = time.perf_counter()
    base = task.sandbox_limits(limits)
    run_limits = base.model_copy(update={"output_cap_bytes": max(base.output_cap_bytes, REPORT_CAP_BYTES)})
    sandbox = await backend.create(
        SandboxSpec(image=task.resolved_image(image), limits=run_limits, workspace=workspace_tar)
    )
    try:
        result = await sandbox.exec(plain_command(task, junit), timeout_s=task.grading.timeout_s + 20)
    finally:
        try:
            await asyncio.shield(sandbox.destroy())
        except SandboxError:
            pass
    elapsed = time.perf_counter() - started
    if not junit:
        return {}, elapsed
    _, _, payload = result.output.rpartition(f"\n{_MARKER} ")
    try:
        xml = gzip.decompress(base64.b64decode(payload.strip(), validate=True)).decode()
    except (ValueError, OSError, EOFError) as exc:
        raise SandboxError(f"plain pytest wrote no junit report: {result.output[-500:]}") from exc
    return junit_outcomes(xml, task.test_files()), elapsed
