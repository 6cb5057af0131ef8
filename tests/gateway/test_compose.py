"""compose.yaml is valid for a real compose tool and wires what the deployment needs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose.yaml"


def _compose_command() -> list[str]:
    """``docker compose`` (plugin) or ``docker-compose``; installs Debian's docker-compose when neither."""
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        return ["docker", "compose"]
    if not shutil.which("docker-compose") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "docker-compose"], env=env, capture_output=True)
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("no compose tool: install docker-compose (Debian) or the docker compose plugin")


def test_compose_config_validates_with_every_profile() -> None:
    compose = _compose_command()
    for extra in ([], ["--profile", "gpu"]):
        result = subprocess.run(
            [*compose, "-f", str(COMPOSE), *extra, "config", "-q"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "RLGUARD_ADMIN_TOKEN": "x" * 40},
        )
        assert result.returncode == 0, result.stderr


def test_compose_wires_postgres_gateway_socket_and_gpu_profiles() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    assert {"postgres", "gateway", "vllm-policy", "vllm-judge", "trainer"} <= set(services)
    gateway = services["gateway"]
    assert "postgresql+psycopg://" in gateway["environment"]["RLGUARD_DATABASE_URL"]
    assert "/var/run/docker.sock:/var/run/docker.sock" in gateway["volumes"]
    assert gateway["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "profiles" not in gateway and "profiles" not in services["postgres"]
    for name in ("vllm-policy", "vllm-judge", "trainer"):
        service = services[name]
        assert service["profiles"] == ["gpu"]
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]


def test_socket_mount_carries_its_security_caveat() -> None:
    lines = COMPOSE.read_text().splitlines()
    mount = next(i for i, line in enumerate(lines) if "/var/run/docker.sock:/var/run/docker.sock" in line)
    caveat = " ".join(lines[max(0, mount - 8) : mount]).lower()
    assert "security" in caveat and "root on the host" in caveat
