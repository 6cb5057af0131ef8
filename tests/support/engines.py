"""The second Docker engine of the scale-out tests (``scripts/ensure_second_engine.sh``).

It runs beside the main engine with its own data root and sockets; the fault tests SIGKILL it (by
the pid in its own pid file, never by name) and start it again with the same script.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parents[2]
ROOT = Path(os.environ.get("RLGUARD_ENGINE2_ROOT", "/tmp/rlguard-dockerd2"))
TLS_PORT = int(os.environ.get("RLGUARD_ENGINE2_TLS_PORT", "23762"))


@dataclass(frozen=True)
class SecondEngine:
    url: str  # unix:///.../docker.sock
    tls_url: str  # tcp://127.0.0.1:PORT, client-certificate TLS
    tls_dir: Path

    def tls(self) -> dict[str, str]:
        """The ``tls`` object of an engine config for ``tls_url``."""
        return {
            "ca_cert": str(self.tls_dir / "ca.pem"),
            "client_cert": str(self.tls_dir / "cert.pem"),
            "client_key": str(self.tls_dir / "key.pem"),
        }

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, timeout=30)

    def answers(self) -> bool:
        try:
            client = docker.DockerClient(base_url=self.url, timeout=3)
        except docker.errors.DockerException:
            return False
        try:
            return bool(client.ping())
        except Exception:
            return False
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL the engine (its dockerd, by its own pid file) and wait until it is silent."""
        pid = int((ROOT / "docker.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while self.answers() and time.monotonic() < deadline:
            time.sleep(0.1)

    def containers(self, instance: str) -> list[str]:
        """Ids of the containers labelled with ``instance`` on this engine."""
        client = self.client()
        try:
            found = client.containers.list(all=True, filters={"label": f"rlguard.instance={instance}"})
            return [c.id for c in found]
        finally:
            client.close()


def ensure_second_engine() -> SecondEngine:
    """Start (or find) the second engine; it holds the sandbox image when this returns."""
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "ensure_second_engine.sh")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the second engine did not start: {result.stderr[-2000:]}")
    return SecondEngine(result.stdout.strip().splitlines()[-1], f"tcp://127.0.0.1:{TLS_PORT}", ROOT / "tls")


def remove_instance(url: str, instance: str) -> None:
    """Force-remove the test's own containers (its instance label) on the engine at ``url``."""
    client = docker.DockerClient(base_url=url, timeout=60)
    try:
        for container in client.containers.list(all=True, filters={"label": f"rlguard.instance={instance}"}):
            container.remove(force=True)
    finally:
        client.close()
