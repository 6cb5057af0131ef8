"""The workspace pytest mode grades (no container needed): test side pristine, start-up hooks gone."""

import io
import tarfile

from tasks.grading.patch import workspace_patch
from tasks.grading.pytest_workspace import added_modules, grading_workspace_tar
from tasks.spec import load_suite
from tasks.testfiles import is_protected


def _members(archive: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: m for m in tar}


def _read(archive: bytes, name: str) -> str:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return tar.extractfile(name).read().decode()  # type: ignore[union-attr]


def _with(archive: bytes, files: dict[str, str], symlinks: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    replaced = set(files) | set(symlinks or {})
    with tarfile.open(fileobj=io.BytesIO(archive)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src:
            if member.name not in replaced:
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            dst.addfile(info)
    return out.getvalue()


def test_protected_paths():
    for name in (
        "tests/helpers.py",
        "pkg/testing/x.py",
        "pkg/test_a.py",
        "a_test.py",
        "pkg/conftest.py",
        "pytest.ini",
        "sub/tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "src/sitecustomize.py",
        "x.pth",
        "foo-1.0.dist-info/entry_points.txt",
        "pkg.egg-info/PKG-INFO",
    ):
        assert is_protected(name), name
    for name in ("pkg/core.py", "README.rst", "setup.py", ".git/config", "pkg/contest.py"):
        assert not is_protected(name), name
    assert is_protected("data/golden.json", ["data"])


def test_grading_workspace_restores_tests_and_drops_hooks(mini_suite):
    task = {t.task_id: t for t in load_suite(mini_suite)}["inflection__inflection-1"]
    pristine_tests = (task.hidden_dir / "test_inflection.py").read_text()
    final = _with(
        task.workspace_tar(),
        {
            "inflection/__init__.py": "X = 'agent code'\n",
            "test_inflection.py": "def test_nothing():\n    pass\n",
            "conftest.py": "raise SystemExit\n",
            "inflection/conftest.py": "raise SystemExit\n",
            "pytest.ini": "[pytest]\naddopts = -k nothing\n",
            "setup.cfg": "[tool:pytest]\naddopts = -k nothing\n",
            "sitecustomize.py": "import os\n",
            "evil.pth": "import os\n",
            "inflection/__pycache__/__init__.cpython-311.pyc": "planted",
            "cheat-1.0.dist-info/entry_points.txt": "[pytest11]\ncheat = cheat\n",
            "difflib.py": "# shadows the stdlib\n",
            "inflection/new_helper.py": "Y = 1\n",
        },
        symlinks={"tests": "/etc"},
    )
    graded = grading_workspace_tar(task, final)
    members = _members(graded)
    assert _read(graded, "inflection/__init__.py") == "X = 'agent code'\n"
    assert _read(graded, "test_inflection.py") == pristine_tests  # test patch applied, agent's edit gone
    assert _read(graded, "setup.cfg") == (task.workspace_dir / "setup.cfg").read_text()
    for gone in (
        "conftest.py",
        "inflection/conftest.py",
        "pytest.ini",
        "sitecustomize.py",
        "evil.pth",
        "inflection/__pycache__/__init__.cpython-311.pyc",
        "cheat-1.0.dist-info/entry_points.txt",
        "tests",
    ):
        assert gone not in members, gone
    assert "inflection/new_helper.py" in members and ".git/HEAD" in members
    assert added_modules(task, graded) == ["difflib"]
    patch, truncated = workspace_patch(task.workspace_tar(), final)
    assert (
        not truncated and "+X = 'agent code'" in patch and "diff --git a/conftest.py b/conftest.py" in patch
    )
    assert "__pycache__" not in patch and ".git/" not in patch
