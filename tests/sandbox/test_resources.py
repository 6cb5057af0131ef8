"""Resource attacks stay inside their sandbox: fork bomb, memory bomb, disk fill, huge files."""

import subprocess

import pytest

from sandbox.base import SandboxError, SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.docker_sandbox import DockerSandbox
from sandbox.hardening import runsc_pids
from tests.sandbox.conftest import small_limits

pytestmark = pytest.mark.docker


async def test_fork_bomb_is_contained_and_host_is_fine(
    backend: DockerBackend, sandbox: DockerSandbox
) -> None:
    result = await sandbox.exec("bomb() { bomb | bomb & }; bomb; sleep 3; echo survived", timeout_s=8)
    assert "Resource temporarily unavailable" in result.output  # the pids limit (runsc: nproc) said no
    # The host can still start processes, and the sandbox is clean and usable again.
    assert subprocess.run(["true"], check=False).returncode == 0
    after = await sandbox.exec("echo alive; ps -e -o pid= | wc -l")
    alive, processes = after.output.split()
    assert alive == "alive" and int(processes) < 10, "bomb processes outlived their command"
    host = (await backend.call(backend.client.api.inspect_container, sandbox.id))["HostConfig"]
    runsc = backend.settings.runtime == "runsc"
    assert host["PidsLimit"] == (runsc_pids(sandbox.limits) if runsc else sandbox.limits.pids)


async def test_memory_bomb_is_killed_and_reported(backend: DockerBackend, sandbox: DockerSandbox) -> None:
    result = await sandbox.exec("python3 -c 'b = bytearray(1 << 30); print(\"ALLOCATED\")'", timeout_s=30)
    assert "ALLOCATED" not in result.output
    if backend.settings.runtime == "runsc":
        # gVisor's kernel lives in the memory cgroup too: the host's OOM killer ends the whole
        # sandbox (the episode is lost, nothing outside is touched) instead of the one process
        assert result.exit_code in (124, 137)
        with pytest.raises(SandboxError):
            await sandbox.exec("echo fine")
        info = await backend.call(backend.client.api.inspect_container, sandbox.id)
        assert info["State"]["OOMKilled"] is True
        return
    assert result.exit_code == 137
    assert "out of memory" in result.output
    after = await sandbox.exec("echo fine")
    assert after.output == "fine\n" and after.exit_code == 0


async def test_disk_fill_stops_at_the_workspace_cap(sandbox: DockerSandbox) -> None:
    cap_mib = 64
    result = await sandbox.exec(
        "for i in 1 2 3 4 5 6 7 8; do head -c 20M /dev/zero > fill$i || break; done 2>&1; du -sm /workspace"
    )
    assert "No space left on device" in result.output
    used_mib = int(result.output.strip().splitlines()[-1].split()[0])
    assert used_mib <= cap_mib
    tmp = await sandbox.exec("{ head -c 100M /dev/zero > /tmp/fill; } 2>&1; echo rc=$?; du -sm /tmp")
    assert "No space left on device" in tmp.output and "rc=0" not in tmp.output
    assert int(tmp.output.strip().splitlines()[-1].split()[0]) <= 32
    after = await sandbox.exec("rm -f fill* /tmp/fill; echo ok > small; cat small")
    assert after.output == "ok\n"


async def test_file_size_ulimit_applies(backend: DockerBackend, sandbox_image: str) -> None:
    limits = small_limits(fsize_bytes=4 << 20)
    sandbox = await backend.create(SandboxSpec(image=sandbox_image, limits=limits))
    try:
        result = await sandbox.exec("head -c 8M /dev/zero > big; echo rc=$?; wc -c < big")
        assert "rc=0" not in result.output
        assert int(result.output.strip().splitlines()[-1]) <= 4 << 20
    finally:
        await sandbox.destroy()
