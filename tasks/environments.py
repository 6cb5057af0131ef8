"""Per-task environments: a derived image with a task's Python dependencies, built without a registry.

A task names what its code needs beyond the sandbox image (``environment: {python_packages: [...],
setup: [...]}`` in ``task.yaml``, or the ``environment`` field of a SWE-bench-format row). The
derived image is built once per recipe and never over the network from inside a container:

1. on the host, ``pip download`` fetches wheels for the image's Python and machine into a cache
   directory (plus pip's own wheel, which runs the install: the sandbox image ships no pip);
2. a build container from the sandbox image starts with ``network_mode: none``; the wheels are
   copied in and installed with ``pip install --no-index``; the task's ``setup`` commands run
   (as root, still without network); setuid bits are stripped again and the wheels removed;
3. the package under test (``exclude``: its distribution and import names) is removed wherever the
   install or the base image put it, files and metadata, and the build fails if any of it is still
   importable or pytest no longer runs: an agent must never find the fix in site-packages;
4. the container is committed as ``rlguard/task-env:<recipe hash>`` with the sandbox image's user,
   workdir and command, and labels naming the recipe and the base image id.

The tag is a pure function of the recipe and the base image's name (:func:`environment_image`), so
resolving a task's image needs no engine; the base image id on the label tells a build on a stale
base from a current one, and a build whose label matches is a cache hit.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import re
import shlex
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.errors import TaskError

if TYPE_CHECKING:
    import docker

ENV_REPOSITORY = "rlguard/task-env"
RECIPE_LABEL = "org.rlguard.env.recipe"
BASE_ID_LABEL = "org.rlguard.env.base-id"
#: Bumped when the build procedure changes what an image holds (part of every recipe hash).
BUILDER_VERSION = "1"
WHEELS_IN_CONTAINER = "/tmp/rlguard-wheels"
MAX_PACKAGES = 64
MAX_SETUP_COMMANDS = 32
MAX_COMMAND_CHARS = 4096
MAX_EXCLUDED = 32
_EXCLUDED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
PIP_DOWNLOAD_TIMEOUT_S = 600.0
BUILD_STEP_TIMEOUT_S = 600
_COMPLETE = ".complete"


class EnvironmentSpec(BaseModel):
    """What a task's environment adds to the sandbox image."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    python_packages: list[str] = Field(
        default_factory=list,
        description="PEP 508 requirements (pin them: NAME==VERSION), installed from host-fetched wheels",
    )
    setup: list[str] = Field(
        default_factory=list,
        description="Shell commands run as root in the build container after the install, with no network",
    )
    exclude: list[str] = Field(
        default_factory=list,
        description="The package under test, by distribution and import name: removed from the image "
        "after the install (a dependency may pull it in, the base image may ship it); the build fails "
        "if it stays",
    )

    @field_validator("python_packages")
    @classmethod
    def _requirements(cls, packages: list[str]) -> list[str]:
        if len(packages) > MAX_PACKAGES:
            raise ValueError(f"at most {MAX_PACKAGES} packages; got {len(packages)}")
        for text in packages:
            try:
                requirement = Requirement(text)
            except InvalidRequirement as exc:
                raise ValueError(f"not a PEP 508 requirement: {text!r} ({exc})") from None
            if requirement.url:
                raise ValueError(f"{text!r}: direct URLs are not allowed; name a package and a version")
        return packages

    @field_validator("setup")
    @classmethod
    def _commands(cls, commands: list[str]) -> list[str]:
        if len(commands) > MAX_SETUP_COMMANDS:
            raise ValueError(f"at most {MAX_SETUP_COMMANDS} setup commands; got {len(commands)}")
        for command in commands:
            if not command.strip() or len(command) > MAX_COMMAND_CHARS:
                raise ValueError(
                    f"setup commands must be non-empty and at most {MAX_COMMAND_CHARS} characters"
                )
        return commands

    @field_validator("exclude")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        if len(names) > MAX_EXCLUDED:
            raise ValueError(f"at most {MAX_EXCLUDED} excluded names; got {len(names)}")
        for name in names:
            if not _EXCLUDED_NAME.match(name):
                raise ValueError(f"not a distribution or import name: {name!r}")
        return names

    @property
    def empty(self) -> bool:
        """True when the environment changes nothing (the sandbox image itself serves)."""
        return not self.python_packages and not self.setup and not self.exclude

    def recipe_hash(self, base_image: str) -> str:
        """A short hash of everything that decides the derived image's contents."""
        recipe = {
            "base": base_image,
            "builder": BUILDER_VERSION,
            "python_packages": self.python_packages,
            "setup": self.setup,
        }
        if self.exclude:  # absent otherwise: recipes without exclusions keep their tags
            recipe["exclude"] = self.exclude
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


_NOT_THE_PACKAGE = frozenset(
    {
        "tests",
        "test",
        "testing",
        "docs",
        "doc",
        "examples",
        "example",
        "setup",
        "conftest",
        "scripts",
        "benchmarks",
        "bench",
        "build",
        "dist",
        "tools",
        "ci",
        "noxfile",
        "tasks",
        "fabfile",
    }
)
_SETUP_NAME = re.compile(r"""\bname\s*=\s*['"]([A-Za-z0-9][A-Za-z0-9._-]*)['"]""")


def package_under_test(workspace: Path) -> list[str]:
    """What an environment must keep out of its image for a project checked out at ``workspace``: its
    distribution name (``pyproject.toml``, ``setup.cfg`` or ``setup.py``) and its top-level modules
    (at the root or under ``src/``; tests, docs and build files excluded)."""
    import configparser
    import tomllib

    names: list[str] = []
    try:
        project = tomllib.loads((workspace / "pyproject.toml").read_text()).get("project") or {}
        if isinstance(project.get("name"), str):
            names.append(project["name"])
    except (OSError, ValueError):
        pass
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string((workspace / "setup.cfg").read_text())
        if parser.has_option("metadata", "name"):
            names.append(parser.get("metadata", "name").strip())
    except (OSError, configparser.Error):
        pass
    try:
        found = _SETUP_NAME.search((workspace / "setup.py").read_text(errors="replace"))
        if found:
            names.append(found.group(1))
    except OSError:
        pass
    for root in (workspace / "src", workspace):
        if not root.is_dir():
            continue
        for path in sorted(root.iterdir()):
            stem = path.stem if path.suffix == ".py" else path.name
            package = path.is_dir() and (path / "__init__.py").is_file()
            module = path.is_file() and path.suffix == ".py"
            wanted = (
                stem.isidentifier() and not stem.startswith(("_", "test")) and stem not in _NOT_THE_PACKAGE
            )
            if (package or module) and wanted:
                names.append(stem)
    return [n for n in dict.fromkeys(names) if _EXCLUDED_NAME.match(n)][:MAX_EXCLUDED]


def environment_image(spec: EnvironmentSpec | None, base_image: str) -> str:
    """The image a task with ``spec`` runs in: ``base_image`` itself, or its derived image's tag."""
    if spec is None or spec.empty:
        return base_image
    return f"{ENV_REPOSITORY}:{spec.recipe_hash(base_image)}"


@dataclass(frozen=True)
class BuildResult:
    """One environment image: its tag, whether it was already built, and how long this call took."""

    image: str
    cached: bool
    seconds: float


def _log(message: str) -> None:
    print(f"rlguard: {message}", file=sys.stderr, flush=True)


def build_environment(
    client: docker.DockerClient,
    spec: EnvironmentSpec,
    base_image: str,
    cache_dir: Path,
    *,
    log: Callable[[str], None] = _log,
    pip: tuple[str, ...] = (sys.executable, "-m", "pip"),
    index_args: tuple[str, ...] = (),
) -> BuildResult:
    """Build (or find) the derived image of ``spec`` over ``base_image``; wheels are cached in ``cache_dir``.

    ``index_args`` are extra ``pip download`` options naming where wheels come from (default: pip's
    configured index; ``("--no-index", "--find-links", DIR)`` for a local directory of wheels).
    Concurrent builds of the same recipe (several processes) wait on a file lock: one builds.
    """
    import docker.errors

    started = time.monotonic()
    tag = environment_image(spec, base_image)
    if tag == base_image:
        return BuildResult(tag, True, 0.0)
    try:
        base_id = client.images.get(base_image).id
    except docker.errors.ImageNotFound:
        raise TaskError(
            f"base image {base_image!r} is not present; run `rlguard sandbox image ensure` first"
        ) from None
    if _current(client, tag, base_id):
        return BuildResult(tag, True, time.monotonic() - started)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _lock(cache_dir / f"{tag.rpartition(':')[2]}.lock"):
        if _current(client, tag, base_id):
            return BuildResult(tag, True, time.monotonic() - started)
        wheels = None
        if spec.python_packages:
            target = _target(client, base_image)
            wheels = fetch_wheels(spec, cache_dir / "wheels", target, pip=pip, index_args=index_args, log=log)
        log(f"building environment image {tag} over {base_image} (offline) ...")
        _build(client, spec, base_image, base_id, tag, wheels)
    log(f"environment image {tag} is ready")
    return BuildResult(tag, False, time.monotonic() - started)


def _current(client: docker.DockerClient, tag: str, base_id: str) -> bool:
    import docker.errors

    try:
        labels = client.images.get(tag).labels or {}
    except docker.errors.ImageNotFound:
        return False
    return labels.get(BASE_ID_LABEL) == base_id


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Target:
    """The interpreter and machine wheels are fetched for (the image's, not the host's)."""

    python_version: str  # "3.11"
    machine: str  # "x86_64", "aarch64"

    @property
    def platforms(self) -> list[str]:
        """manylinux tags from the oldest to current glibc; pure wheels ("any") always match."""
        return [f"manylinux{tag}_{self.machine}" for tag in ("2014", "_2_17", "_2_28", "_2_31", "_2_36")]


def _target(client: docker.DockerClient, image: str) -> Target:
    """Ask the image itself which Python it runs (one short container, no network)."""
    import docker.errors

    probe = "import platform, sys; print('%d.%d' % sys.version_info[:2], platform.machine())"
    try:
        out = client.containers.run(
            image, ["python3", "-c", probe], network_mode="none", remove=True, stdout=True, stderr=True
        )
    except docker.errors.DockerException as exc:
        raise TaskError(f"cannot run python3 in {image!r} to learn its version: {exc}") from exc
    version, machine = out.decode().split()
    return Target(version, machine)


def fetch_wheels(
    spec: EnvironmentSpec,
    cache_dir: Path,
    target: Target,
    *,
    pip: tuple[str, ...] = (sys.executable, "-m", "pip"),
    index_args: tuple[str, ...] = (),
    log: Callable[[str], None] = _log,
) -> Path:
    """Wheels for ``spec`` and their dependencies (plus pip's own wheel) in a cached directory.

    Only wheels (``--only-binary :all:``): an sdist would need a build, and builds run nowhere
    with network. A directory marked complete is reused without asking the index again.
    """
    key = hashlib.sha256(
        json.dumps([spec.python_packages, target.python_version, target.machine, index_args]).encode()
    ).hexdigest()[:16]
    dest = cache_dir / key
    if (dest / _COMPLETE).is_file():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    log(f"fetching wheels for {', '.join(spec.python_packages)} (Python {target.python_version}) ...")
    platform_args = [arg for tag in target.platforms for arg in ("--platform", tag)]
    command = [
        *pip,
        "download",
        "--disable-pip-version-check",
        "--quiet",
        "--only-binary",
        ":all:",
        "--python-version",
        target.python_version,
        "--implementation",
        "cp",
        *platform_args,
        *index_args,
        "--dest",
        str(dest),
        "pip",
        *spec.python_packages,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_DOWNLOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TaskError(
            f"pip download of {spec.python_packages} took over {PIP_DOWNLOAD_TIMEOUT_S:.0f} s"
        ) from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
        raise TaskError(f"pip download of {spec.python_packages} failed:\n{tail}")
    (dest / "requirements.txt").write_text("\n".join(spec.python_packages) + "\n")
    (dest / _COMPLETE).write_text("")
    return dest


def _tar_dir(directory: Path, arcname: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(directory), arcname=arcname, filter=_root_owned)
    return buf.getvalue()


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


# After the task's own commands: no setuid way back to root, no wheels left, bytecode compiled (the
# root filesystem is read-only at run time, so imports could not cache it later).
_FINISH = (
    f"rm -rf {WHEELS_IN_CONTAINER} /root/.cache /tmp/* && "
    "find / -xdev -type f \\( -perm -4000 -o -perm -2000 \\) -exec chmod ug-s {} + && "
    "(python3 -m compileall -q /usr/local/lib/python3* >/dev/null 2>&1 || true)"
)


def _build(
    client: docker.DockerClient,
    spec: EnvironmentSpec,
    base_image: str,
    base_id: str,
    tag: str,
    wheels: Path | None,
) -> None:
    import docker.errors

    container = client.containers.create(
        base_image,
        # Bounded: a build container orphaned by a killed process stops by itself.
        command=["sleep", str(4 * BUILD_STEP_TIMEOUT_S)],
        user="root",
        working_dir="/",
        network_mode="none",
        network_disabled=True,
        security_opt=["no-new-privileges"],
        # Root for installing into /usr/local, but only the file capabilities installs and set-up
        # commands use (no raw sockets, device nodes, chroot, kill of other users' processes).
        cap_drop=["ALL"],
        cap_add=["CHOWN", "DAC_OVERRIDE", "FOWNER"],
        mem_limit="2g",
        pids_limit=512,
        labels={"org.rlguard.role": "env-build", RECIPE_LABEL: tag.rpartition(":")[2]},
    )
    try:
        container.start()
        steps: list[tuple[str, str]] = []
        if wheels is not None:
            container.put_archive("/tmp", _tar_dir(wheels, WHEELS_IN_CONTAINER.rsplit("/", 1)[1]))
            pip_wheel = next(wheels.glob("pip-*.whl"), None)
            if pip_wheel is None:
                raise TaskError(f"{wheels}: no pip wheel among the fetched wheels")
            install = [
                "python3",
                f"{WHEELS_IN_CONTAINER}/{pip_wheel.name}/pip",
                "install",
                "--no-index",
                "--find-links",
                WHEELS_IN_CONTAINER,
                "--break-system-packages",
                "--root-user-action=ignore",
                "--disable-pip-version-check",
                "--no-cache-dir",
                "--quiet",
                "-r",
                f"{WHEELS_IN_CONTAINER}/requirements.txt",
            ]
            steps.append(("pip install (offline)", shlex.join(install)))
        steps += [(f"setup command {command!r}", command) for command in spec.setup]
        if spec.exclude:
            steps.append(("removing the package under test", _exclusion_command(spec.exclude)))
        steps.append(("image clean-up", _FINISH))
        for what, command in steps:
            code, output = container.exec_run(
                ["timeout", str(BUILD_STEP_TIMEOUT_S), "bash", "-c", command], user="root", workdir="/"
            )
            if code != 0:
                tail = "\n".join(output.decode(errors="replace").strip().splitlines()[-12:])
                raise TaskError(f"environment build of {tag}: {what} failed (exit {code}):\n{tail}")
        container.stop(timeout=1)
        changes = [
            "USER agent",
            "WORKDIR /workspace",
            'CMD ["sleep", "infinity"]',
            f'LABEL {RECIPE_LABEL}="{tag.rpartition(":")[2]}" {BASE_ID_LABEL}="{base_id}" '
            'org.rlguard.role="task-env"',
        ]
        repository, _, version = tag.rpartition(":")
        container.commit(repository=repository, tag=version, changes=changes)
    except docker.errors.DockerException as exc:
        raise TaskError(f"environment build of {tag} failed in the engine: {exc}") from exc
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True)


# Runs in the build container (as root, no network) after the install and the set-up commands: every
# distribution and top-level module named in ``exclude`` found in the image's site directories is
# removed, files and metadata; then nothing of it may be importable and pytest must still run.
_EXCLUDE_SCRIPT = r"""
import importlib, importlib.metadata as md, importlib.util, json, os, re, shutil, site, subprocess, sys
import sysconfig
names = json.loads(sys.argv[1])
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
wanted = {norm(n) for n in names}
roots = {os.path.realpath(p) for p in [*site.getsitepackages(), sysconfig.get_path("purelib"),
         sysconfig.get_path("platlib"), "/usr/lib/python3/dist-packages"] if p}
inside = lambda p: any(os.path.realpath(p).startswith(r + os.sep) for r in roots)
def remove(path):
    if not inside(path) or not os.path.lexists(path):
        return
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
removed = []
for dist in list(md.distributions()):
    name = dist.metadata["Name"] or ""
    if norm(name) not in wanted:
        continue
    top = (dist.read_text("top_level.txt") or "").split()
    for f in dist.files or []:
        remove(str(dist.locate_file(f)))
    for module in top:
        for candidate in (module, module + ".py"):
            remove(str(dist.locate_file(candidate)))
    remove(str(dist._path))
    removed.append(name)
importlib.invalidate_caches()
for module in [n for n in names if n.isidentifier()]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin in ("built-in", "frozen"):
        continue
    places = list(spec.submodule_search_locations or []) or [spec.origin]
    for place in places:
        if inside(place):
            remove(place)
            removed.append(module)
importlib.invalidate_caches()
left = []
for module in [n for n in names if n.isidentifier()]:
    spec = importlib.util.find_spec(module)
    if spec is not None and spec.origin not in ("built-in", "frozen") and inside(spec.origin or ""):
        left.append(f"{module} at {spec.origin}")
for dist in md.distributions():
    if norm(dist.metadata["Name"] or "") in wanted:
        left.append(f"distribution {dist.metadata['Name']}")
if left:
    sys.exit("the image still holds the package under test: " + "; ".join(left))
check = subprocess.run([sys.executable, "-m", "pytest", "--version"], capture_output=True, text=True)
if check.returncode != 0:
    sys.exit("removing the package under test broke pytest (pytest needs it): " + check.stderr[-300:])
print("removed:", ", ".join(removed) or "nothing was installed")
"""


def _exclusion_command(names: list[str]) -> str:
    """The build step that removes ``names`` from the image and checks they are gone."""
    return shlex.join(["python3", "-I", "-c", _EXCLUDE_SCRIPT, json.dumps(names)])


def build_environments(
    client: docker.DockerClient,
    wanted: list[tuple[EnvironmentSpec | None, str]],
    cache_dir: Path,
    *,
    index_args: tuple[str, ...] = (),
    log: Callable[[str], None] = _log,
) -> list[BuildResult]:
    """Build each distinct ``(environment, base image)`` pair once; tasks without an environment need none."""
    results: dict[str, BuildResult] = {}
    for spec, base_image in wanted:
        tag = environment_image(spec, base_image)
        if spec is None or tag == base_image or tag in results:
            continue
        results[tag] = build_environment(client, spec, base_image, cache_dir, index_args=index_args, log=log)
    return list(results.values())
