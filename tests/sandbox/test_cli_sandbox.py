"""``rlguard sandbox ...`` as a user runs it: argv in, merged output out, exit code through."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

RLGUARD = [sys.executable, "-m", "rlguard"]


def rlguard(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RLGUARD, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )


def test_exec_passes_argv_without_a_shell_and_returns_its_exit_code(
    sandbox_image: str, tmp_path: Path
) -> None:
    (tmp_path / "hello.txt").write_text("from the host\n")
    done = rlguard(
        "sandbox", "exec", "--workspace", str(tmp_path), "--",
        "sh", "-c", "cat hello.txt; echo 'it''s $HOME' \"$0\"; exit 5", "a b;c",
    )  # fmt: skip
    assert done.returncode == 5, done.stderr
    assert done.stdout == "from the host\nits $HOME a b;c\n"  # single quotes: no expansion


def test_exec_timeout_exits_124(sandbox_image: str) -> None:
    done = rlguard("sandbox", "exec", "--timeout", "1", "--memory", "256m", "--", "sleep", "30")
    assert done.returncode == 124
    assert "timed out" in done.stdout


def test_bad_limits_are_one_clear_line(sandbox_image: str) -> None:
    done = rlguard("sandbox", "exec", "--memory", "lots", "--", "true")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: bad sandbox limits: memory")
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_missing_image_is_one_clear_line(sandbox_image: str) -> None:
    done = rlguard("sandbox", "exec", "--image", "rlguard/no-such-image:0", "--", "true")
    assert done.returncode == 2
    assert "not present" in done.stderr and "Traceback" not in done.stderr


def test_no_engine_is_one_clear_line() -> None:
    done = rlguard("sandbox", "gc", env={"RLGUARD_DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert done.returncode == 2
    assert "no Docker engine answers" in done.stderr and "Traceback" not in done.stderr


def test_gc_and_image_ensure_commands(sandbox_image: str) -> None:
    gc = rlguard("sandbox", "gc", env={"RLGUARD_INSTANCE": "test-cli-gc-nothing"})
    assert gc.returncode == 0 and "removed 0" in gc.stdout
    ensure = rlguard("sandbox", "image", "ensure")
    assert ensure.returncode == 0 and ensure.stdout.strip() == sandbox_image


def test_terminated_exec_removes_its_sandbox(sandbox_image: str, docker_client) -> None:
    import signal
    import time

    instance = "test-cli-term"
    label = {"label": f"rlguard.instance={instance}"}
    proc = subprocess.Popen(
        [*RLGUARD, "sandbox", "exec", "--", "sleep", "60"],
        env={**os.environ, "RLGUARD_INSTANCE": instance},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(300):
            if docker_client.containers.list(filters=label):
                break
            time.sleep(0.1)
        time.sleep(1.0)  # let the command start inside
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2 and "interrupted" in err
    assert docker_client.containers.list(all=True, filters=label) == []


def test_memory_above_the_engine_and_nan_timeout_are_clear_errors(sandbox_image: str) -> None:
    huge = rlguard("sandbox", "exec", "--memory", "100000g", "--", "true")
    assert huge.returncode == 2 and "exceeds the engine's" in huge.stderr
    nan = rlguard("sandbox", "exec", "--timeout", "nan", "--", "true")
    assert nan.returncode == 2 and "finite number" in nan.stderr and "Traceback" not in nan.stderr
