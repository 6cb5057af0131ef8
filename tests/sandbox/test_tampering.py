"""The agent attacks the in-sandbox runner (same uid as the agent): the host stays safe and sane.

The runner may be killed, stopped, or fed forged output; every one of these costs at most the one
command, and the next command gets a fresh runner. Nothing the runner sends can grow host memory.
"""

import os
import time
from pathlib import Path

import pytest

from sandbox.docker_sandbox import RUNNER_KILLED_NOTE, DockerSandbox

pytestmark = pytest.mark.docker

RUNNER = "$(pgrep -x rlguard-exec)"


async def runner_pid(sandbox: DockerSandbox) -> str:
    result = await sandbox.exec("pgrep -x rlguard-exec")
    assert result.exit_code == 0, result.output
    return result.output.strip()


async def test_casual_pkill_does_not_hit_the_runner(sandbox: DockerSandbox) -> None:
    before = await runner_pid(sandbox)
    await sandbox.exec(
        f"pkill python3; pkill -f python; killall python3 2>/dev/null; kill -TERM {RUNNER}; true"
    )
    assert await runner_pid(sandbox) == before


async def test_killed_runner_costs_one_command_then_restarts(sandbox: DockerSandbox) -> None:
    before = await runner_pid(sandbox)
    result = await sandbox.exec(f"kill -9 {RUNNER}")
    assert result.exit_code == 137 and result.output == RUNNER_KILLED_NOTE
    after = await sandbox.exec("echo back")
    assert after.output == "back\n"
    assert await runner_pid(sandbox) != before


async def test_runner_channel_and_memory_are_closed_to_the_agent(sandbox: DockerSandbox) -> None:
    forged = '{"id": "0000000000000000", "ok": true, "output": "ALL TESTS PASSED", "exit_code": 0}'
    result = await sandbox.exec(
        f"P={RUNNER}; echo '{forged}' > /proc/$P/fd/1; cat /proc/$P/fd/0 < /dev/null; head -c 1 /proc/$P/mem;"
        " ls /proc/$P/fd; echo real"
    )
    assert "ALL TESTS PASSED" not in result.output
    if sandbox._backend.settings.runtime == "runsc":
        # gVisor (2022) lets the same uid open a non-dumpable process's /proc/<pid>/fd: a forged
        # line reaches the channel, has the wrong request id, and costs this one command
        assert result.exit_code == 137 and "runner was killed" in result.output, result.output
        mem = await sandbox.exec(f"P={RUNNER}; head -c 1 /proc/$P/mem")
        assert "Permission denied" in mem.output
    else:
        assert result.output.count("Permission denied") == 4, result.output
        assert result.output.endswith("real\n")
    probe = (
        "import ctypes, os, subprocess\n"
        'pid = int(subprocess.check_output(["pgrep", "-x", "rlguard-exec"]))\n'
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        'print("attach", libc.ptrace(16, pid, 0, 0), ctypes.get_errno())\n'
    )
    traced = await sandbox.exec(f"python3 -c '{probe}'")
    assert traced.output.strip() == "attach -1 1"  # EPERM


async def test_a_broken_channel_costs_one_command_and_bounded_memory(sandbox: DockerSandbox) -> None:
    # Even if something did get a stray line or an endless one into the channel, the host caps it,
    # drops the channel and starts a new runner. Simulated here by the host side of the channel.
    def rss_kib() -> int:
        for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    await sandbox.exec("true")
    runner = sandbox._runner
    assert runner is not None
    runner._stdout += b"x" * (4 << 20)  # an endless line arriving before the answer
    before = rss_kib()
    result = await sandbox.exec("echo hidden")
    assert result.exit_code == 137 and result.output == RUNNER_KILLED_NOTE
    assert rss_kib() - before < 64 * 1024
    assert sandbox._runner is None
    assert (await sandbox.exec("echo next")).output == "next\n"


async def test_stopped_runner_is_timed_out_by_the_host(sandbox: DockerSandbox) -> None:
    started = time.monotonic()
    result = await sandbox.exec(f"kill -STOP {RUNNER}; sleep 30", timeout_s=1)
    assert result.timed_out and result.exit_code == 124
    assert time.monotonic() - started < 15
    after = await sandbox.exec("echo alive; pgrep -c -x rlguard-exec")
    assert after.output == "alive\n1\n"


async def test_killing_every_agent_process_leaves_the_sandbox_usable(sandbox: DockerSandbox) -> None:
    result = await sandbox.exec("kill -9 -1")
    assert result.exit_code == 137
    after = await sandbox.exec("echo alive; ps -o user= -p 1")
    assert after.output == "alive\nnobody\n"
