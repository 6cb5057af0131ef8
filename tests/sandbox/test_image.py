"""The sandbox image: both builders agree, the mirror comes from apt's own sources, contents hold."""

import re
from pathlib import Path

import docker
import pytest

from rlguard import __version__
from sandbox.image import IMAGE_DIR, IMAGE_ENV, PACKAGES, RECIPE_LABEL, default_image, recipe
from sandbox.image.offline import find_apt_source


def test_default_image_is_versioned() -> None:
    assert default_image() == f"rlguard/sandbox-python:{__version__}"


def test_dockerfile_installs_the_same_packages_and_env_as_the_offline_build() -> None:
    dockerfile = (IMAGE_DIR / "Dockerfile").read_text()
    install = re.search(r"--no-install-recommends(.*?)&&", dockerfile, re.S)
    assert install is not None
    assert sorted(install.group(1).replace("\\", " ").split()) == sorted(PACKAGES)
    for key, value in IMAGE_ENV.items():
        assert f"{key}={value}" in dockerfile
    assert "USER agent" in dockerfile and "WORKDIR /workspace" in dockerfile
    assert "rootfs-setup.sh" in dockerfile


def test_apt_source_from_deb822_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "# comment\nTypes: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
    )
    source = find_apt_source("bookworm", tmp_path)
    assert source.uri == "http://mirror.example/debian" and source.suite == "bookworm"
    assert source.keyring == "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_apt_source_from_one_line_list(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "deb http://security.example/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main\n"
    )
    source = find_apt_source("bookworm", tmp_path)
    assert source.uri == "http://mirror.example/debian" and source.keyring == "/k.gpg"


def test_apt_source_missing_is_a_clear_error(tmp_path: Path) -> None:
    from sandbox.base import SandboxError

    (tmp_path / "sources.list.d").mkdir()
    with pytest.raises(SandboxError, match="no apt source"):
        find_apt_source("bookworm", tmp_path)


@pytest.mark.docker
async def test_image_contents(docker_client: docker.DockerClient, sandbox_image: str, shared) -> None:
    attrs = docker_client.images.get(sandbox_image).attrs
    assert attrs["Config"]["User"] == "agent" and attrs["Config"]["WorkingDir"] == "/workspace"
    assert attrs["Size"] < 300 * 1024 * 1024
    assert attrs["Config"]["Labels"][RECIPE_LABEL] == recipe()  # built from today's recipe
    result = await shared.exec(
        "id; python3 --version; python3 -m pytest --version; git --version; ls /usr/share/doc | wc -l"
    )
    out = result.output
    assert f"uid={shared.uid} gid={shared.uid}" in out  # the sandbox's own uid, not the image's agent
    assert "Python 3." in out and "pytest" in out and "git version" in out
    assert out.strip().endswith("0")


def test_recipe_names_the_contents(monkeypatch: pytest.MonkeyPatch) -> None:
    import sandbox.image as image

    before = image.recipe()
    assert before == image.recipe() and len(before) == 16
    monkeypatch.setattr(image, "PACKAGES", (*image.PACKAGES, "curl"))
    assert image.recipe() != before
