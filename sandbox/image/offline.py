"""Offline image builder: ``debootstrap --variant=minbase`` then ``docker import``.

Used when no registry is reachable. The Debian mirror is read at build time from the host's own apt
sources (deb822 ``*.sources`` files or ``sources.list``), so the repository never names a host and
the build works wherever ``apt-get install`` works.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.base import SandboxError
from sandbox.image import IMAGE_DIR, IMAGE_ENV, IMAGE_USER, IMAGE_WORKDIR, PACKAGES, RECIPE_LABEL, recipe
from sandbox.version import RLGUARD_VERSION

if TYPE_CHECKING:
    import docker

APT_DIR = Path("/etc/apt")


@dataclass(frozen=True)
class AptSource:
    """One Debian archive the host's apt already trusts."""

    uri: str
    suite: str
    keyring: str | None = None


def host_codename(os_release: Path = Path("/etc/os-release")) -> str:
    """The host's release codename (``bookworm``), the suite the image is built from."""
    for line in os_release.read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise SandboxError(f"cannot tell the Debian release: no VERSION_CODENAME in {os_release}")


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = None
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
            continue
        if raw[0] in " \t" and key:
            current[key] += " " + raw.strip()
        elif ":" in raw:
            key, value = raw.split(":", 1)
            key = key.strip().lower()
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def find_apt_source(codename: str, apt_dir: Path = APT_DIR) -> AptSource:
    """The first ``deb`` source of the host serving ``codename`` itself (not -updates/-security)."""
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in _deb822_stanzas(path.read_text()):
            if "deb" not in stanza.get("types", "").split() or stanza.get("enabled", "yes") == "no":
                continue
            if codename in stanza.get("suites", "").split():
                keyring = stanza.get("signed-by")
                keyring = keyring if keyring and keyring.startswith("/") else None
                return AptSource(stanza["uris"].split()[0], codename, keyring)
    lists = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if not words or words[0] != "deb":
                continue
            words = words[1:]
            options = ""
            if words and words[0].startswith("["):
                while words and not words[0].endswith("]"):
                    options += words.pop(0) + " "
                options += words.pop(0) if words else ""
            if len(words) >= 2 and words[1] == codename:
                keyring = None
                for option in options.strip("[] ").split():
                    if option.startswith("signed-by="):
                        keyring = option.split("=", 1)[1]
                return AptSource(words[0], codename, keyring)
    raise SandboxError(
        f"no apt source for {codename!r} in {apt_dir}; the offline image build needs the host's Debian mirror"
    )


def _run(cmd: list[str], what: str, log_path: Path) -> None:
    with log_path.open("ab") as log_file:
        done = subprocess.run(cmd, stdout=log_file, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        raise SandboxError(
            f"{what} failed (exit {done.returncode}); last lines of {log_path}:\n" + "\n".join(tail)
        )


def build_offline(client: docker.DockerClient, tag: str, log: Callable[[str], None]) -> None:
    """Bootstrap a minimal Debian root filesystem and import it as ``tag``."""
    if os.geteuid() != 0:
        raise SandboxError(
            "the offline image build needs root (debootstrap); run it as root or use the Dockerfile"
        )
    if shutil.which("debootstrap") is None:
        raise SandboxError("the offline image build needs debootstrap: apt-get install debootstrap")
    source = find_apt_source(host_codename())
    work = Path(tempfile.mkdtemp(prefix="rlguard-image-", dir="/var/tmp"))
    rootfs, archive, log_path = work / "rootfs", work / "rootfs.tar", work / "build.log"
    try:
        log(f"debootstrap {source.suite} from the host's apt mirror (about a minute) ...")
        cmd = ["debootstrap", "--variant=minbase", "--components=main", f"--include={','.join(PACKAGES)}"]
        if source.keyring:
            cmd.append(f"--keyring={source.keyring}")
        _run([*cmd, source.suite, str(rootfs), source.uri], "debootstrap", log_path)
        _run(["sh", str(IMAGE_DIR / "rootfs-setup.sh"), str(rootfs)], "rootfs set-up", log_path)
        excludes = [f"--exclude=./{d}/*" for d in ("dev", "proc", "sys", "run")]
        _run(
            ["tar", "--numeric-owner", "-C", str(rootfs), *excludes, "-cf", str(archive), "."],
            "tar",
            log_path,
        )
        changes = [
            f"USER {IMAGE_USER}",
            f"WORKDIR {IMAGE_WORKDIR}",
            *(f"ENV {key}={value}" for key, value in IMAGE_ENV.items()),
            'CMD ["sleep", "infinity"]',
            f'LABEL org.rlguard.image="sandbox-python" org.rlguard.version="{RLGUARD_VERSION}"'
            f' {RECIPE_LABEL}="{recipe()}"',
        ]
        repository, _, version = tag.rpartition(":")
        log("docker import ...")
        client.api.import_image(src=str(archive), repository=repository, tag=version, changes=changes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
