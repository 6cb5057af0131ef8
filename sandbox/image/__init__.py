"""The sandbox image ``rlguard/sandbox-python:<version>``: find it, or build it one of two ways.

Both builders produce the same contents that matter (python3, pytest, git, bash, coreutils, user
``agent`` uid 1000, workdir ``/workspace``, no setuid binaries) because both run the shared
``rootfs-setup.sh`` and install the same package list:

- ``Dockerfile``: for hosts that can pull ``debian:bookworm-slim`` from a registry;
- offline (``sandbox.image.offline``): ``debootstrap --variant=minbase`` from the Debian mirror the
  host's apt sources already name, then ``docker import`` with user, workdir and environment set.

The automatic choice never probes the internet (tests and set-up must not send traffic off the
machine): the Dockerfile is used when its base image is already present locally or the engine has a
registry mirror configured, otherwise the offline builder runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from sandbox.base import SandboxError
from sandbox.version import RLGUARD_VERSION

if TYPE_CHECKING:
    import docker

IMAGE_REPOSITORY = "rlguard/sandbox-python"
IMAGE_DIR = Path(__file__).resolve().parent
DOCKERFILE_BASE = "debian:bookworm-slim"
#: Installed by both builders; ``tests/sandbox`` checks the Dockerfile names the same list.
PACKAGES = (
    "python3",
    "python-is-python3",  # agents type `python`; without it their first test run fails
    "python3-pytest",
    "git",
    "bash",
    "coreutils",
    "procps",
    "tar",
    "findutils",
    "grep",
    "sed",
    "diffutils",
)
#: Image configuration shared by both builders (``docker import --change`` lines offline).
IMAGE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
IMAGE_USER = "agent"
IMAGE_WORKDIR = "/workspace"

BuildMode = Literal["auto", "dockerfile", "offline"]


def default_image() -> str:
    """The image sandboxes use unless a setting or a task names another."""
    return f"{IMAGE_REPOSITORY}:{RLGUARD_VERSION}"


def _log(message: str) -> None:
    print(f"rlguard: {message}", file=sys.stderr, flush=True)


RECIPE_LABEL = "org.rlguard.recipe"


def recipe() -> str:
    """A hash of everything that decides the image's contents, stored as a label on it.

    The tag only carries rlguard's version; the label tells a stale build of the same version
    (another package list, another ``rootfs-setup.sh``) from a current one.
    """
    digest = hashlib.sha256()
    for name in ("Dockerfile", "rootfs-setup.sh"):
        digest.update((IMAGE_DIR / name).read_bytes())
    digest.update(repr((PACKAGES, sorted(IMAGE_ENV.items()), IMAGE_USER, IMAGE_WORKDIR)).encode())
    return digest.hexdigest()[:16]


def image_exists(client: docker.DockerClient, image: str) -> bool:
    """Whether the engine already holds ``image`` (no pull is attempted)."""
    import docker.errors

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False
    return True


def _current(client: docker.DockerClient, image: str) -> bool:
    """Whether ``image`` exists and, if it is rlguard's own, was built from today's recipe."""
    import docker.errors

    try:
        labels = client.images.get(image).labels or {}
    except docker.errors.ImageNotFound:
        return False
    return image != default_image() or labels.get(RECIPE_LABEL) == recipe()


def ensure_image(
    client: docker.DockerClient,
    image: str | None = None,
    mode: BuildMode = "auto",
    log: Callable[[str], None] = _log,
) -> str:
    """Make sure ``image`` (default: :func:`default_image`) exists, building it if it is ours.

    A foreign image that is missing is an error: rlguard never pulls implicitly.
    """
    image = image or default_image()
    if _current(client, image):
        return image
    if image != default_image():
        raise SandboxError(
            f"sandbox image {image!r} is not present in the Docker engine; pull or build it first"
        )
    # Set-up and several test sessions may all find the image missing: one builds, the rest wait.
    with _build_lock():
        if not _current(client, image):
            build_image(client, mode=mode, log=log)
    return image


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    path = Path(tempfile.gettempdir()) / "rlguard-image-build.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _registry_usable(client: docker.DockerClient) -> bool:
    """True when a Dockerfile build can get its base image without probing the internet."""
    if image_exists(client, DOCKERFILE_BASE):
        return True
    mirrors = (client.info().get("RegistryConfig") or {}).get("Mirrors") or []
    return bool(mirrors)


def build_image(
    client: docker.DockerClient, mode: BuildMode = "auto", log: Callable[[str], None] = _log
) -> str:
    """Build :func:`default_image` with the Dockerfile or offline; return its tag."""
    import docker.errors

    tag = default_image()
    previous = client.images.get(tag).id if image_exists(client, tag) else None
    if mode == "auto":
        mode = "dockerfile" if _registry_usable(client) else "offline"
    if mode == "dockerfile":
        log(f"building {tag} from {IMAGE_DIR / 'Dockerfile'} ...")
        _build_dockerfile(client, tag)
    else:
        from sandbox.image.offline import build_offline

        log(f"building {tag} offline (debootstrap from this host's apt mirror) ...")
        build_offline(client, tag, log=log)
    if previous is not None and previous != client.images.get(tag).id:
        # The stale build lost its tag; remove it unless running containers still use it.
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(previous)
    log(f"image {tag} is ready")
    return tag


def _build_dockerfile(client: docker.DockerClient, tag: str) -> None:
    import docker.errors

    try:
        client.images.build(
            path=str(IMAGE_DIR),
            tag=tag,
            rm=True,
            buildargs={"RLGUARD_VERSION": RLGUARD_VERSION, "RLGUARD_RECIPE": recipe()},
            pull=False,
        )
    except (docker.errors.BuildError, docker.errors.APIError) as exc:
        raise SandboxError(
            f"Dockerfile build of {tag} failed: {exc}; try `rlguard sandbox image build --offline`"
        ) from exc
