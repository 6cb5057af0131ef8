"""Per-task environments: the spec, the image name, and real offline builds on the Docker engine.

Wheels come from a local directory (a probe wheel built here plus the pip wheel Python bundles), so
the build path is the real one — ``pip download`` on the host, ``pip install --no-index`` in a
container without network, ``docker commit`` — without any traffic off this machine.
"""

from __future__ import annotations

import contextlib
import ensurepip
import json
import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml
from pydantic import ValidationError

from sandbox.base import SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.image import ensure_image
from sandbox.settings import SandboxSettings
from tasks.environments import (
    BASE_ID_LABEL,
    ENV_REPOSITORY,
    RECIPE_LABEL,
    EnvironmentSpec,
    build_environment,
    build_environments,
    environment_image,
)
from tasks.errors import TaskError
from tasks.spec import load_suite

# Interfaces the build container saw, written into the image by a setup command (only "lo" expected).
NET_PROBE = "awk -F: 'NR>2 {gsub(/ /, \"\", $1); print $1}' /proc/net/dev > /etc/rlguard-build-interfaces"


def test_exclusions_are_names_and_change_the_tag_only_when_present() -> None:
    with pytest.raises(ValidationError, match="not a distribution or import name"):
        EnvironmentSpec(exclude=["pkg; rm -rf /"])
    base = "rlguard/sandbox-python:1"
    plain = EnvironmentSpec(python_packages=["six==1.16.0"])
    assert plain.recipe_hash(base) == EnvironmentSpec(
        python_packages=["six==1.16.0"], exclude=[]
    ).recipe_hash(base)
    assert EnvironmentSpec(python_packages=["six==1.16.0"], exclude=["six"]).recipe_hash(
        base
    ) != plain.recipe_hash(base)
    assert not EnvironmentSpec(exclude=["more_itertools"]).empty


def test_the_package_under_test_is_named_from_the_project(tmp_path: Path) -> None:
    from tasks.environments import package_under_test

    (tmp_path / "src" / "fancy_pkg").mkdir(parents=True)
    (tmp_path / "src" / "fancy_pkg" / "__init__.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='fancy-pkg')\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "fancy-pkg"\n')
    (tmp_path / "conftest.py").write_text("")
    assert package_under_test(tmp_path) == ["fancy-pkg", "fancy_pkg"]


def test_spec_rejects_what_cannot_be_built_offline() -> None:
    with pytest.raises(ValidationError, match="not a PEP 508 requirement"):
        EnvironmentSpec(python_packages=["six==="])
    with pytest.raises(ValidationError, match="direct URLs"):
        EnvironmentSpec(python_packages=["six @ https://example.invalid/six.whl"])
    with pytest.raises(ValidationError, match="at most 64 packages"):
        EnvironmentSpec(python_packages=[f"p{i}==1" for i in range(65)])
    with pytest.raises(ValidationError, match="non-empty"):
        EnvironmentSpec(setup=["  "])
    with pytest.raises(ValidationError, match="extra"):
        EnvironmentSpec.model_validate({"python_packages": [], "apt": ["curl"]})


def test_image_name_is_a_pure_function_of_recipe_and_base() -> None:
    spec = EnvironmentSpec(python_packages=["six==1.16.0"])
    base = "rlguard/sandbox-python:1"
    assert environment_image(None, base) == base
    assert environment_image(EnvironmentSpec(), base) == base
    tag = environment_image(spec, base)
    assert tag.startswith(f"{ENV_REPOSITORY}:") and tag == environment_image(spec, base)
    assert environment_image(spec, "rlguard/sandbox-python:2") != tag
    assert environment_image(EnvironmentSpec(python_packages=["six==1.15.0"]), base) != tag
    assert environment_image(EnvironmentSpec(python_packages=["six==1.16.0"], setup=["true"]), base) != tag


def _write_task(root: Path, environment: dict | None, image: str = "") -> None:
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "mod.py").write_text("X = 1\n")
    (root / "hidden").mkdir()
    (root / "hidden" / "test_mod.py").write_text("def test_x():\n    assert True\n")
    spec: dict = {"instructions": "do it"}
    if environment is not None:
        spec["environment"] = environment
    if image:
        spec["image"] = image
    (root / "task.yaml").write_text(yaml.safe_dump(spec))


def test_task_resolves_to_its_environment_image(tmp_path: Path) -> None:
    suite = tmp_path / "envsuite"
    _write_task(suite / "plain", None)
    _write_task(suite / "withenv", {"python_packages": ["six==1.16.0"]})
    _write_task(suite / "ownbase", {"python_packages": ["six==1.16.0"]}, image="example/base:1")
    tasks = {task.task_id: task for task in load_suite(suite)}
    assert tasks["plain"].resolved_image("conf:1") == "conf:1"
    env = tasks["withenv"].environment
    assert env is not None and env.python_packages == ["six==1.16.0"]
    assert tasks["withenv"].resolved_image("conf:1") == environment_image(env, "conf:1")
    assert tasks["ownbase"].resolved_image("conf:1") == environment_image(env, "example/base:1")


def test_bad_environment_in_task_yaml_names_file_and_field(tmp_path: Path) -> None:
    _write_task(tmp_path / "badsuite" / "t1", {"python_packages": ["not a requirement!!"]})
    with pytest.raises(TaskError, match=r"task.yaml: field 'environment.python_packages'"):
        load_suite(tmp_path / "badsuite")


# --- real builds ---------------------------------------------------------------------------------


def _probe_wheel(directory: Path, name: str, version: str, requires: str = "") -> None:
    """A minimal pure-Python wheel: module ``<name>`` with ``VERSION``, and its dist-info."""
    module = name.replace("-", "_")
    dist = f"{module}-{version}.dist-info"
    requirement = f"Requires-Dist: {requires}\n" if requires else ""
    files = {
        f"{module}.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requirement}",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: rlguard-test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{dist}/RECORD"])
    with zipfile.ZipFile(directory / f"{module}-{version}-py3-none-any.whl", "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[docker.DockerClient, str]]:
    client = docker.from_env()
    base = ensure_image(client)
    yield client, base
    client.close()


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A find-links directory: a probe package and the pip wheel that ships with Python."""
    directory = tmp_path_factory.mktemp("wheelhouse")
    bundled = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    if not bundled:
        pytest.fail("this Python bundles no pip wheel (ensurepip/_bundled); the offline build needs one")
    shutil.copy(bundled[-1], directory)
    _probe_wheel(directory, "rlguard-probe", "1.0")
    # a test dependency that pulls in (a release of) the package under test
    _probe_wheel(directory, "rlguard-victim", "2.0")
    _probe_wheel(directory, "rlguard-helper", "1.0", requires="rlguard-victim")
    return directory


@pytest.fixture
def built(engine, wheelhouse, tmp_path: Path) -> Iterator[tuple[str, EnvironmentSpec]]:
    """A freshly built environment image (a unique recipe per test), removed afterwards."""
    client, base = engine
    spec = EnvironmentSpec(
        python_packages=["rlguard-probe==1.0"],
        setup=[NET_PROBE, f"echo {uuid.uuid4().hex} > /etc/rlguard-test-nonce"],
    )
    result = build_environment(
        client, spec, base, tmp_path / "cache", index_args=("--no-index", "--find-links", str(wheelhouse))
    )
    assert not result.cached
    yield result.image, spec
    client.images.remove(result.image, force=True)


def _run(client: docker.DockerClient, image: str, command: str) -> str:
    return client.containers.run(image, ["bash", "-c", command], network_mode="none", remove=True).decode()


@pytest.mark.docker
def test_built_image_has_the_package_and_the_sandbox_image_config(engine, built) -> None:
    client, base = engine
    image, _ = built
    out = _run(
        client, image, "python3 -c 'import rlguard_probe as m; print(m.VERSION, m.__file__)'; id -un; pwd"
    )
    version, path, user, cwd = out.split()
    assert version == "1.0" and path.startswith("/usr/local/lib/python3")
    assert (user, cwd) == ("agent", "/workspace")
    attrs = client.images.get(image).attrs["Config"]
    assert attrs["Cmd"] == ["sleep", "infinity"]
    assert attrs["Labels"][BASE_ID_LABEL] == client.images.get(base).id
    # Nothing of the build is left behind: no wheels, no pip, no setuid binaries.
    leftovers = _run(
        client,
        image,
        "ls /tmp; python3 -c 'import pip' 2>/dev/null && echo pip-importable; "
        "find / -xdev -type f -perm -4000 2>/dev/null; true",
    )
    assert leftovers.strip() == ""


@pytest.mark.docker
def test_build_container_had_no_network(engine, built) -> None:
    client, _ = engine
    image, _ = built
    assert _run(client, image, "cat /etc/rlguard-build-interfaces").split() == ["lo"]


@pytest.mark.docker
def test_second_build_is_a_cache_hit(engine, built, wheelhouse, tmp_path: Path) -> None:
    client, base = engine
    image, spec = built
    image_id = client.images.get(image).id
    again = build_environment(client, spec, base, tmp_path / "other-cache", index_args=("--no-index",))
    assert again.cached and again.image == image
    assert client.images.get(image).id == image_id
    results = build_environments(client, [(spec, base), (spec, base), (None, base)], tmp_path / "c")
    assert [(r.image, r.cached) for r in results] == [(image, True)]


@pytest.mark.docker
async def test_sandbox_from_the_built_image_has_no_network(engine, built) -> None:
    _, _ = engine
    image, _ = built
    backend = DockerBackend(f"test-env-{uuid.uuid4().hex[:8]}", None, SandboxSettings(warm_pool_size=0))
    try:
        sandbox = await backend.create(SandboxSpec(image=image))
        try:
            result = await sandbox.exec(
                "awk -F: 'NR>2 {gsub(/ /, \"\", $1); print $1}' /proc/net/dev; "
                "python3 -c 'import rlguard_probe; print(rlguard_probe.VERSION)'"
            )
        finally:
            await sandbox.destroy()
    finally:
        await backend.close()
    assert result.exit_code == 0
    assert result.output.split() == ["lo", "1.0"]


@pytest.mark.docker
def test_failing_setup_command_is_one_clear_error_and_leaves_no_image(engine, tmp_path: Path) -> None:
    client, base = engine
    spec = EnvironmentSpec(setup=[f"echo {uuid.uuid4().hex}; echo broken >&2; exit 3"])
    with pytest.raises(TaskError, match=r"setup command .* failed \(exit 3\):\n(.*\n)?broken"):
        build_environment(client, spec, base, tmp_path)
    image = environment_image(spec, base)
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(image)
    recipe = image.rpartition(":")[2]
    assert not client.containers.list(all=True, filters={"label": f"{RECIPE_LABEL}={recipe}"})


@pytest.mark.docker
def test_missing_wheel_fails_on_the_host_before_any_container(engine, wheelhouse, tmp_path: Path) -> None:
    client, base = engine
    spec = EnvironmentSpec(python_packages=[f"rlguard-absent-{uuid.uuid4().hex[:6]}==1.0"])
    with pytest.raises(TaskError, match="pip download"):
        build_environment(
            client, spec, base, tmp_path, index_args=("--no-index", "--find-links", str(wheelhouse))
        )


@pytest.mark.docker
def test_the_package_under_test_is_kept_out_of_the_image(engine, wheelhouse, tmp_path: Path) -> None:
    """Pulled in by a dependency (rlguard-victim, required by rlguard-helper) or shipped by the base
    image (Debian's more_itertools): both are gone from the built image, which still runs pytest."""
    client, base = engine
    assert "dist-packages/more_itertools" in _run(
        client, base, "python3 -c 'import more_itertools as m; print(m.__file__)'"
    )
    spec = EnvironmentSpec(
        python_packages=["rlguard-helper==1.0"],
        setup=[f"echo {uuid.uuid4().hex} > /etc/rlguard-test-nonce"],
        exclude=["rlguard-victim", "rlguard_victim", "more-itertools", "more_itertools"],
    )
    result = build_environment(
        client, spec, base, tmp_path / "cache", index_args=("--no-index", "--find-links", str(wheelhouse))
    )
    try:
        probe = (
            "import importlib.util as u, importlib.metadata as m; "
            "print([n for n in ('rlguard_victim', 'more_itertools', 'rlguard_helper') if u.find_spec(n)]); "
            "print(sorted(d.metadata['Name'] for d in m.distributions() if 'victim' in d.metadata['Name'] "
            "or 'itertools' in d.metadata['Name']))"
        )
        out = _run(client, result.image, f'python3 -c "{probe}"; python3 -m pytest --version 2>&1')
        assert out.splitlines()[:2] == ["['rlguard_helper']", "[]"], out
        assert "pytest" in out.splitlines()[2]
    finally:
        client.images.remove(result.image, force=True)


@pytest.mark.docker
def test_a_package_pytest_needs_cannot_be_excluded(engine, tmp_path: Path) -> None:
    client, base = engine
    spec = EnvironmentSpec(setup=[f"echo {uuid.uuid4().hex}"], exclude=["pluggy"])
    with pytest.raises(TaskError, match="broke pytest"):
        build_environment(client, spec, base, tmp_path)


def _cli(*args: str, state_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLGUARD_STATE_DIR": str(state_dir)}
    return subprocess.run(
        [sys.executable, "-m", "rlguard", *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.docker
def test_cli_build_env_builds_once_then_reports_cached(engine, tmp_path: Path) -> None:
    client, base = engine
    marker = uuid.uuid4().hex
    environment = {"setup": [f"echo {marker} > /etc/rlguard-cli-marker"]}
    suite = tmp_path / "clisuite"
    _write_task(suite / "one", environment)
    _write_task(suite / "two", environment)  # same recipe: one image
    _write_task(suite / "plain", None)
    image = environment_image(EnvironmentSpec.model_validate(environment), base)
    try:
        first = _cli("tasks", "build-env", str(suite), "--json", state_dir=tmp_path / "state")
        assert first.returncode == 0, first.stderr
        assert [(r["image"], r["cached"]) for r in json.loads(first.stdout)] == [(image, False)]
        assert _run(client, image, "cat /etc/rlguard-cli-marker").strip() == marker
        second = _cli("tasks", "build-env", str(suite), state_dir=tmp_path / "state")
        assert second.returncode == 0 and second.stdout.strip() == f"{image}: cached"
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(image, force=True)


def test_cli_refuses_unknown_suite_names(tmp_path: Path) -> None:
    done = _cli("tasks", "build", "nosuch", state_dir=tmp_path)
    assert done.returncode == 2
    assert "no buildable suite 'nosuch'; known: realworld" in done.stderr
