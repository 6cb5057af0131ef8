"""Ctrl-C in ``rlguard rollout run``: the episode in flight is uploaded and finished (graded, end
reason ``error``) before the command exits, instead of being left ``running`` with nothing stored.
A real ``rlguard rollout run`` process against the real tiny policy server and a real gateway."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]


def test_ctrl_c_finishes_the_episodes_in_flight(
    gateway, policy_server, tiny_model_dir: Path, tmp_path
) -> None:
    version = f"interrupt-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RLGUARD_ADMIN_TOKEN": gateway.admin_token,
           "RLGUARD_STATE_DIR": str(tmp_path), "RLGUARD_ROLLOUT__MAX_TOKENS_PER_TURN": "24"}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlguard", "rollout", "run", "--policy-url", f"{policy_server.url}/v1",
         "--gateway-url", gateway.url, "--task", "matrix-transpose", "--episodes", "1", "--max-turns", "500",
         "--model", str(tiny_model_dir), "--policy-version", version],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    admin = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {gateway.admin_token}"})
    try:
        deadline = time.monotonic() + 240
        running = []
        while not running and time.monotonic() < deadline and proc.poll() is None:
            page = admin.get("/v1/episodes", params={"policy_version": version, "status": "running"}).json()
            running = page["items"]
            time.sleep(0.5)
        assert running, "the rollout never started an episode"
        batches = policy_server.batches
        while policy_server.batches < batches + 3 and time.monotonic() < deadline:
            time.sleep(0.2)  # a few model turns of the episode happen
        assert proc.poll() is None, "the episode ended on its own before the interrupt"
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output[-3000:]
    assert "interrupted: the episodes in flight were finished" in output
    [episode] = admin.get("/v1/episodes", params={"policy_version": version}).json()["items"]
    assert episode["status"] == "finished" and episode["end_reason"] == "error", output[-3000:]
    assert episode["reward"] is not None and episode["sub_trajectories"] >= 1, (episode, output[-3000:])
    admin.close()
