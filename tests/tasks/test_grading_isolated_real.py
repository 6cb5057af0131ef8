"""Isolated grading of real projects' own test suites, in the real Docker engine.

The tasks in ``tests/fixtures/isolated-real`` are real PyPI projects (packaging 23.0, webcolors
1.13; see its README) with one injected bug and the project's own test file as the hidden test:
src layouts, tests as a package (``__init__.py``), thousands of parametrized tests, a
``unittest.TestCase`` class not named ``Test*``, library objects compared with ``==``, ``<`` and
``hash``. The image ships packaging 23.0 (pytest itself imports it): if the image's copy won over
the workspace's, the bug would pass. A forcing conftest, pytest.ini and sitecustomize never beat
the bug, and a 2,000-test suite loses no result.
"""

import io
import tarfile
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest

from sandbox.docker_backend import DockerBackend
from sandbox.image import ensure_image
from sandbox.settings import SandboxSettings
from tasks.grading import isolated as isolated_mode
from tasks.grading.isolated import GradeResult, check_task, grade
from tasks.spec import Task, load_suite

pytestmark = pytest.mark.docker

SUITE = Path(__file__).parents[1] / "fixtures" / "isolated-real"
TASKS = {task.task_id: task for task in load_suite(SUITE)}
CHEATS = {
    "conftest.py": """
        import pytest

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            outcome = yield
            outcome.get_result().outcome = "passed"
    """,
    "pytest.ini": "[pytest]\naddopts = -p no:python --deselect tests\n",
    "sitecustomize.py": "import builtins\nbuiltins.__import__ = None\n",
    "src/conftest.py": "import os\nos._exit(0)\n",
}


@pytest.fixture(scope="module")
async def backend() -> AsyncIterator[DockerBackend]:
    client = docker.from_env()
    image = ensure_image(client)
    client.close()
    backend = DockerBackend(f"test-isoreal-{uuid.uuid4().hex[:8]}", None, SandboxSettings(image=image))
    yield backend
    leaked = backend.owned_ids()
    await backend.close()
    assert leaked == []


def with_files(task: Task, files: dict[str, str]) -> bytes:
    """The task's initial workspace with ``files`` (full contents) written over it."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(task.workspace_tar())) as src,
        tarfile.open(fileobj=out, mode="w") as dst,
    ):
        for member in src:
            if member.name not in files:
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            dst.addfile(info, io.BytesIO(data))
    return out.getvalue()


def failing(result: GradeResult) -> set[str]:
    return {nodeid for nodeid, outcome in result.details["tests"].items() if outcome != "passed"}


def assert_every_test_reported(task: Task, result: GradeResult) -> None:
    assert result.details["reason"] == "graded", result.details
    assert set(result.details["tests"]) == set(check_task(task))
    assert "missing" not in result.details["tests"].values()


def test_tests_are_counted_as_pytest_collects_them():
    packaging_ids = check_task(TASKS["packaging-version"])
    assert len(packaging_ids) > 2000  # parametrize expanded, class TestVersion included
    assert "test_version.py::TestVersion::test_valid_versions[1.0.dev456]" in packaging_ids
    assert "test_html5.py::HTML5Tests::test_serialize_simple_color" in check_task(TASKS["webcolors-html5"])


async def test_webcolors_bug_fails_fix_passes_and_cheats_change_nothing(backend):
    task = TASKS["webcolors-html5"]
    untouched = await grade(backend, task, task.workspace_tar())
    assert_every_test_reported(task, untouched)
    assert failing(untouched) == {"test_html5.py::HTML5Tests::test_serialize_simple_color"}
    fixed = await grade(backend, task, with_files(task, task.solution_files()))
    assert fixed.reward == 1.0, fixed.details
    cheats = {name: textwrap.dedent(text) for name, text in CHEATS.items()}
    cheated = await grade(backend, task, with_files(task, cheats))
    assert failing(untouched) <= failing(cheated) and cheated.reward <= untouched.reward, cheated.details


async def test_packaging_workspace_copy_wins_over_the_images_and_no_result_is_lost(backend):
    """18,000 parametrized tests: every result arrives; the bug (absent from the image's copy) shows."""
    task = TASKS["packaging-version"]
    untouched = await grade(backend, task, task.workspace_tar())
    assert_every_test_reported(task, untouched)
    broken = failing(untouched)
    assert broken and all("prerelease" in nodeid for nodeid in broken), sorted(broken)[:20]
    assert untouched.passed == untouched.total - len(broken) > 17_000
    fixed = await grade(backend, task, with_files(task, task.solution_files()))
    assert fixed.reward == 1.0, {k: v for k, v in fixed.details.items() if k != "tests"}


async def test_two_thousand_tests_with_long_ids_lose_no_result(backend, tmp_path, monkeypatch):
    root = tmp_path / "big" / "many"
    (root / "workspace" / "bigcalc").mkdir(parents=True)
    (root / "hidden").mkdir()
    (root / "task.yaml").write_text("instructions: nothing to do\ngrading:\n  timeout_s: 300\n")
    (root / "workspace" / "bigcalc" / "__init__.py").write_text("def square(x):\n    return x * x\n")
    (root / "hidden" / "test_many.py").write_text(
        "import pytest\nfrom bigcalc import square\n\n"
        "@pytest.mark.parametrize('n', range(2000), ids=lambda n: f'case-{n:04d}-' + 'x' * 150)\n"
        "def test_square(n):\n    assert square(n) == n * n\n"
    )
    (task,) = load_suite(tmp_path / "big")
    result = await grade(backend, task, task.workspace_tar())
    assert_every_test_reported(task, result)
    assert result.total == result.passed == 2000 and result.reward == 1.0
    # Were the stream cut anyway, the reward is 0 with the reason, never a shorter list of results.
    monkeypatch.setattr(isolated_mode, "GRADER_OUTPUT_CAP_BYTES", 64 * 1024)
    cut = await grade(backend, task, task.workspace_tar())
    assert (cut.reward, cut.details["reason"]) == (0.0, "grader output truncated")
