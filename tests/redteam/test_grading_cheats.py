"""Cheats built at run time (``tests/redteam/grading_cheats.py``) against grading, on a real project.

The instance is ``inflection`` 0.5.1 with an injected regression (``tasks.minisuite``, imported as a
SWE-bench row: the project's own 455-test suite plus the test patch's regression test). For every
cheat, in real containers of the sandbox image:

1. plain pytest is fooled: ``python3 -m pytest`` over the agent's workspace with the test patch
   applied (what a naive harness runs) reports every FAIL_TO_PASS and PASS_TO_PASS test passed;
2. ``pytest`` mode scores it 0, graded as ``finish`` grades: the mode (supervisor, monitor, second
   opinion), then the guard's review of the changed files under the ``zero`` policy;
3. ``isolated`` mode scores it 0: the same instance as an authored task whose hidden tests are the
   FAIL_TO_PASS tests, workspace code behind proxies.

The reference solution is resolved and the untouched workspace is not, in both modes, with the same
machinery on (``test_reference_and_untouched_workspaces``).
"""

from __future__ import annotations

import ast
import asyncio
import io
import shutil
import tarfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest
import yaml

from guard.review import review_changes
from guard.review_policy import apply_patch_review
from guard.rules import RuleEngine
from sandbox.docker_backend import DockerBackend
from sandbox.image import ensure_image
from sandbox.settings import SandboxSettings
from tasks.grading.baseline import plain_pytest
from tasks.grading.modes import grade_task
from tasks.minisuite import build_rows
from tasks.spec import Task, load_suite
from tasks.swebench import import_swebench
from tasks.workspaces import solution_workspace
from tests.redteam.grading_cheats import PACKAGE, Cheat, cheats

pytestmark = pytest.mark.docker

TASK_ID = "inflection__inflection-1"
ENGINE = RuleEngine.load()


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The grading calibration is cached per user: a fresh cache, so this module computes its own."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def pytest_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    root = tmp_path_factory.mktemp("cheats")
    rows, repos = build_rows(root)
    import_swebench(rows, repos, root / "suite" / "mini")
    return {task.task_id: task for task in load_suite(root / "suite" / "mini")}[TASK_ID]


def _f2p_only(source: str, names: set[str]) -> str:
    """The test module with only the FAIL_TO_PASS test functions (and its imports and tables)."""
    tree = ast.parse(source)
    tree.body = [
        node
        for node in tree.body
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name in names
    ]
    return ast.unparse(tree) + "\n"


@pytest.fixture(scope="module")
def isolated_task(pytest_task: Task, tmp_path_factory: pytest.TempPathFactory) -> Task:
    """The same instance as an ``isolated``-mode task: hidden tests = its FAIL_TO_PASS tests."""
    root = tmp_path_factory.mktemp("isolated") / "iso"
    task_dir = root / "inflection-isolated"
    shutil.copytree(pytest_task.workspace_dir, task_dir / "workspace")
    shutil.copytree(pytest_task.solution_dir, task_dir / "solution")
    names = {nodeid.split("::")[1].split("[")[0] for nodeid in pytest_task.grading.fail_to_pass}
    (task_dir / "hidden").mkdir()
    source = (pytest_task.hidden_dir / "test_inflection.py").read_text()
    (task_dir / "hidden" / "test_f2p.py").write_text(_f2p_only(source, names))
    spec = {
        "instructions": pytest_task.instructions,
        "grading": {"mode": "isolated", "reward": "all_or_nothing", "timeout_s": 120, "restore": []},
        "git": pytest_task.git.model_dump() if pytest_task.git else None,
    }
    (task_dir / "task.yaml").write_text(yaml.safe_dump({k: v for k, v in spec.items() if v is not None}))
    (task,) = load_suite(root)
    return task


@pytest.fixture(scope="module")
async def backend(cache_home: Path) -> AsyncIterator[DockerBackend]:
    client = docker.from_env()
    image = ensure_image(client)
    client.close()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache_home))
        backend = DockerBackend(f"test-cheats-{uuid.uuid4().hex[:8]}", None, SandboxSettings(image=image))
        yield backend
        leaked = backend.owned_ids()
        await backend.close()
    assert leaked == []


def overlay(archive: bytes, files: dict[str, str | bytes], links: dict[str, str] | None = None) -> bytes:
    """``archive`` with ``files`` written over it and ``links`` made (parents created)."""
    links = links or {}
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        names = set()
        for member in src:
            names.add(member.name)
            if member.name not in files and member.name not in links:
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for name in [*files, *links]:
            parts = name.split("/")
            for i in range(1, len(parts)):
                folder = "/".join(parts[:i])
                if folder not in names:
                    names.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o755, 1000, 1000
                    dst.addfile(info)
        for name, data in files.items():
            payload = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(payload), 0o644, 1000, 1000
            dst.addfile(info, io.BytesIO(payload))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.uid, info.gid = tarfile.SYMTYPE, target, 1000, 1000
            dst.addfile(info)
    return out.getvalue()


async def graded_as_finish_grades(backend: DockerBackend, task: Task, workspace: bytes) -> tuple[float, dict]:
    """The mode's result, then the guard's review of the changed files under the ``zero`` policy."""
    result = await grade_task(backend, task, workspace)
    if result.changes is None:
        return result.reward, dict(result.details)
    return apply_patch_review(
        result.reward, dict(result.details), review_changes(result.changes, ENGINE), "zero"
    )


def with_test_patch(task: Task, workspace: bytes) -> bytes:
    """The agent's workspace with the test patch applied, as a naive harness runs it."""
    hidden = {
        p.relative_to(task.hidden_dir).as_posix(): p.read_bytes()
        for p in task.hidden_dir.rglob("*")
        if p.is_file()
    }
    return overlay(workspace, {name: data for name, data in hidden.items() if data})


async def test_reference_and_untouched_workspaces(backend, pytest_task, isolated_task):
    for task in (pytest_task, isolated_task):
        gold, details = await graded_as_finish_grades(backend, task, solution_workspace(task))
        assert gold == 1.0, (
            task.id,
            details.get("reason"),
            details.get("patch_review"),
            details.get("monitor"),
        )
        untouched, details = await graded_as_finish_grades(backend, task, task.workspace_tar())
        assert untouched == 0.0, (task.id, details.get("reason"))
    _, details = await graded_as_finish_grades(backend, pytest_task, solution_workspace(pytest_task))
    opinion = details["second_opinion"]
    assert opinion["calibrated"] and opinion["not_runnable"] == [] and opinion["disagree"] == []
    assert set(pytest_task.grading.fail_to_pass) <= set(opinion["selected"])
    assert details["supervisor"]["exec_guard"] == "kernel" and details["supervisor"]["self_execs"] == 1
    assert [f for f in details["monitor"]["findings"] if f.get("severity") == "tampering"] == []


CHEATS = {cheat.kind: cheat for cheat in cheats("")}


@pytest.mark.parametrize("kind", sorted(CHEATS))
async def test_cheat_fools_plain_pytest_and_scores_zero_in_both_modes(
    backend, pytest_task, isolated_task, kind
):
    source = (pytest_task.workspace_dir / PACKAGE).read_text()
    cheat: Cheat = next(c for c in cheats(source) if c.kind == kind)
    workspace = overlay(pytest_task.workspace_tar(), cheat.files, cheat.symlinks)
    plain, _ = await plain_pytest(backend, pytest_task, with_test_patch(pytest_task, workspace))
    not_passed = {
        n: plain.get(n, "missing") for n in pytest_task.expected_test_ids() if plain.get(n) != "passed"
    }
    assert not_passed == {}, f"{kind}: does not fool plain pytest: {list(not_passed.items())[:3]}"
    (reward, details), (iso_reward, iso_details) = await asyncio.gather(
        graded_as_finish_grades(backend, pytest_task, workspace),
        graded_as_finish_grades(
            backend, isolated_task, overlay(isolated_task.workspace_tar(), cheat.files, cheat.symlinks)
        ),
    )
    assert reward == 0.0, (kind, details.get("reason"), details.get("graded_reason"))
    assert iso_reward == 0.0, (kind, iso_details.get("reason"), iso_details.get("tests"))
