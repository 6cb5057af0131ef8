"""Round 3, finding 4d: a package whose ``__init__`` is a compiled extension shadows an installed
module, and the shadowing check of ``pytest``-mode grading did not count it.

The attack, for real: a ``difflib/__init__.abi3.so`` (compiled here with the host's C compiler
against the stable ABI) in the final workspace is what ``import difflib`` loads in the grading
image instead of the standard library. The check counted ``x.py``, ``x.so`` and ``x/__init__.py``
only. It now counts every form the path finder imports: extension ``__init__`` of any ABI tag, a
link named like a module, a namespace portion. Graded in a fresh container of the real engine, the
workspace scores 0 with the reason named.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sysconfig
import tarfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest

from sandbox.base import SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.image import ensure_image
from sandbox.settings import SandboxSettings
from tasks.grading.modes import grade_task
from tasks.grading.pytest_workspace import added_modules, grading_workspace_tar
from tasks.spec import Task, load_suite

EXTENSION = r"""
#define Py_LIMITED_API 0x030B0000
#include <Python.h>
static PyObject *ndiff(PyObject *self, PyObject *args) { return PyObject_GetIter(PyTuple_New(0)); }
static PyMethodDef methods[] = {{"ndiff", ndiff, METH_VARARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "difflib", NULL, -1, methods};
PyMODINIT_FUNC PyInit_difflib(void) {
    PyObject *m = PyModule_Create(&module);
    PyModule_AddIntConstant(m, "SHADOWED", 1);
    return m;
}
"""


@pytest.fixture(scope="module")
def compiled_difflib(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real CPython extension module named ``difflib`` (stable ABI: loads in the image's 3.11)."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    include = sysconfig.get_paths()["include"]
    if compiler is None or not Path(include, "Python.h").is_file():
        pytest.skip("no C compiler or Python headers on this machine to build the extension")
    work = tmp_path_factory.mktemp("ext")
    (work / "difflib.c").write_text(EXTENSION)
    subprocess.run(
        [
            compiler,
            "-shared",
            "-fPIC",
            "-O1",
            f"-I{include}",
            "-o",
            str(work / "d.so"),
            str(work / "difflib.c"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return (work / "d.so").read_bytes()


def _with(base: bytes, files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(base)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src:
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            dst.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            dst.addfile(info)
    return out.getvalue()


@pytest.fixture(scope="module")
def task(mini_suite: Path) -> Task:
    return {t.task_id: t for t in load_suite(mini_suite)}["inflection__inflection-1"]


@pytest.mark.parametrize(
    "name",
    [
        "difflib/__init__.abi3.so",
        "difflib/__init__.cpython-311-x86_64-linux-gnu.so",
        "difflib/__init__.so",
        "difflib.cpython-311-x86_64-linux-gnu.so",
        "difflib/__init__.py",
    ],
)
def test_every_form_of_a_module_is_counted(task: Task, name: str) -> None:
    final = _with(task.workspace_tar(), {name: b"\x7fELF"})
    assert added_modules(task, grading_workspace_tar(task, final)) == ["difflib"]


def test_a_link_named_like_a_module_and_a_namespace_portion_are_counted(task: Task) -> None:
    final = _with(task.workspace_tar(), {"zipp/extra.py": b"X = 1\n"}, links={"difflib": "inflection"})
    assert added_modules(task, grading_workspace_tar(task, final)) == ["difflib", "zipp"]


@pytest.fixture(scope="module")
async def backend() -> AsyncIterator[DockerBackend]:
    client = docker.from_env()
    image = ensure_image(client)
    client.close()
    backend = DockerBackend(f"test-shadow-{uuid.uuid4().hex[:8]}", None, SandboxSettings(image=image))
    yield backend
    await backend.close()


@pytest.mark.docker
async def test_a_compiled_package_shadows_for_real_and_grading_refuses_it(
    backend: DockerBackend, task: Task, compiled_difflib: bytes
) -> None:
    final = _with(task.workspace_tar(), {"difflib/__init__.abi3.so": compiled_difflib})
    # the attack is real: in the image, with /workspace first on the path, difflib is the agent's
    sandbox = await backend.create(
        SandboxSpec(
            image=task.resolved_image(backend.default_image), limits=task.sandbox_limits(), workspace=final
        )
    )
    try:
        run = await sandbox.exec("python3 -c 'import difflib; print(difflib.__file__, difflib.SHADOWED)'")
    finally:
        await sandbox.destroy()
    assert run.output.strip() == "/workspace/difflib/__init__.abi3.so 1", run.output
    # and grading refuses to run the suite over it
    result = await grade_task(backend, task, final)
    assert result.reward == 0.0 and not result.details["resolved"]
    assert result.details["reason"] == "workspace shadows installed modules"
    assert result.details["modules"] == ["difflib"]
