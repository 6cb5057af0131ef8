"""Red team round 2 (issue 11), sandbox findings, each written as the attack against the real engine.

6: io_uring and AF_VSOCK from inside a sandbox with the default settings; 7: one sandbox exhausting
its uid's inotify instances while another needs one; 8: a rename racer against the file tools, and a
process left by an earlier call writing into a later call's output; 2 (sandbox side): ``chmod 000``
does not break the workspace export.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
import time

import pytest

from sandbox.base import PathEscapeError, SandboxError, SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.docker_sandbox import DockerSandbox

pytestmark = pytest.mark.docker

SYSCALLS = r"""
import ctypes, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 8, params)  # io_uring_setup(8, &params)
print("io_uring_setup", fd, errno.errorcode.get(ctypes.get_errno(), "0") if fd < 0 else "opened")
for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
    try:
        socket.socket(socket.AF_VSOCK, kind).close()
        print("vsock", kind, "opened")
    except OSError as exc:
        print("vsock", kind, errno.errorcode[exc.errno])
"""


async def _exec_python(sandbox: DockerSandbox, source: str, timeout_s: float = 20) -> str:
    await sandbox.write_file("probe.py", source.encode())
    result = await sandbox.exec("python3 probe.py", timeout_s=timeout_s)
    return result.output


async def _other_exec(sandbox: DockerSandbox, argv: list[str], detach: bool = False) -> str:
    """A command beside the runner (a plain ``docker exec`` as the sandbox's agent uid)."""
    backend = sandbox._backend
    container = await backend.call(backend.client.containers.get, sandbox.id)
    result = await backend.call(container.exec_run, argv, user=sandbox.user, detach=detach)
    return "" if detach else result.output.decode(errors="replace")


async def test_default_seccomp_denies_io_uring_and_vsock(victim: DockerSandbox) -> None:
    # The victim comes from a backend with default settings: no seccomp mode chosen by the test.
    out = await _exec_python(victim, SYSCALLS)
    if victim._backend.settings.runtime == "runsc":
        # gVisor (2022) applies no OCI seccomp profile: io_uring is its own Go implementation (the
        # host's is never reached) and it has no AF_VSOCK at all
        assert out.count("EAFNOSUPPORT") == 2 and "vsock 1 opened" not in out, out
        return
    assert "io_uring_setup -1 EPERM" in out, out
    assert out.count("EPERM") == 3 and "opened" not in out, out
    status = (await victim.exec("grep Seccomp: /proc/self/status")).output.split()
    assert status == ["Seccomp:", "2"]


async def test_sandboxes_have_their_own_uid_not_a_host_account(
    redteam_backend: DockerBackend, redteam_image: str
) -> None:
    specs = [SandboxSpec(image=redteam_image, limits=redteam_backend.settings.limits) for _ in range(2)]
    boxes = await asyncio.gather(*(redteam_backend.create(spec) for spec in specs))
    try:
        uids = [int((await box.exec("id -u")).output) for box in boxes]
        assert uids == [box.uid for box in boxes] and uids[0] != uids[1]
        assert all(uid >= 2_000_000_000 for uid in uids)  # far above host accounts (1000 is one here)
        owner = (
            await boxes[0].exec("python3 -c 'import os; print(os.stat(\"/workspace\").st_uid)'")
        ).output.strip()
        assert owner == str(uids[0])
    finally:
        await asyncio.gather(*(box.destroy() for box in boxes))


HOG = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
held = []
while True:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
with open("/tmp/held", "w") as out:
    out.write(str(len(held)))
time.sleep(30)
"""

INIT = r"""
import ctypes
fd = ctypes.CDLL(None, use_errno=True).inotify_init1(0)
print("inotify", "ok" if fd >= 0 else f"failed errno {ctypes.get_errno()}")
"""


async def test_inotify_exhaustion_in_one_sandbox_leaves_another_alone(
    redteam_backend: DockerBackend, redteam_image: str
) -> None:
    limits = redteam_backend.settings.limits
    hog, other = await asyncio.gather(
        *(redteam_backend.create(SandboxSpec(image=redteam_image, limits=limits)) for _ in range(2))
    )
    try:
        await hog.write_file("hog.py", HOG.encode())
        attack = asyncio.create_task(hog.exec("python3 hog.py", timeout_s=40))
        if redteam_backend.settings.runtime == "runsc":
            # each gVisor sandbox has a kernel of its own: whatever the hog holds, the other's are apart
            await asyncio.sleep(5)
            assert "inotify ok" in await _exec_python(other, INIT)
            attack.cancel()
            return
        held = ""
        deadline = time.monotonic() + 30
        while not held and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            held = (await _other_exec(hog, ["cat", "/tmp/held"])).strip()
            held = held if held.isdigit() else ""
        # The hog stopped at its uid's max_user_instances (128 here), far below its fd limit.
        assert held and int(held) < hog.limits.nofile - 10, held
        assert "inotify ok" in await _exec_python(other, INIT)
        # ... and the hog itself is refused: the limit is real, only no longer shared.
        assert "inotify failed" in (await _other_exec(hog, ["python3", "-c", INIT]))
        attack.cancel()
    finally:
        await asyncio.gather(hog.destroy(), other.destroy())


RACER = """
import os
os.chdir("/workspace")
while True:
    for step in (lambda: os.rename("real", "hold"), lambda: os.symlink("/tmp", "real"),
                 lambda: os.unlink("real"), lambda: os.rename("hold", "real")):
        try:
            step()
        except OSError:
            pass
"""


async def test_rename_racer_cannot_lead_file_tools_out_of_the_workspace(victim: DockerSandbox) -> None:
    # Outside the workspace: a "secret" (the container's /etc/passwd in the original finding) and a
    # place a write must never reach. Inside: real/passwd. The racer swaps real <-> a link to /tmp.
    await victim.exec("rm -rf real hold /tmp/evil; mkdir real; echo SECRET > /tmp/passwd")
    await victim.write_file("real/passwd", b"fake\n")
    # The racer runs beside the runner as the agent's uid: what a process surviving a call would be.
    await _other_exec(victim, ["python3", "-c", RACER], detach=True)
    inside = refused = 0
    try:
        for _ in range(400):
            for operation in (victim.read_file("real/passwd"), victim.list_dir("real")):
                try:
                    result = await operation
                except (PathEscapeError, FileNotFoundError, SandboxError):
                    refused += 1
                    continue
                if isinstance(result, bytes):
                    assert result == b"fake\n", result
                else:  # /tmp's listing would show passwd at 7 bytes ("SECRET\n")
                    assert ("passwd", 7) not in {(e.name, e.size) for e in result}, result
                inside += 1
            try:
                await victim.write_file("real/evil", b"x")
            except (PathEscapeError, FileNotFoundError, SandboxError):
                refused += 1
    finally:
        await victim.exec("true")  # ends the racer: nothing of the agent's survives a command
    assert inside > 0, (inside, refused)
    assert (await victim.exec("cat /tmp/evil 2>&1; true")).output.endswith("No such file or directory\n")
    await victim.exec("rm -rf real hold /tmp/passwd")


async def test_a_process_left_by_a_call_cannot_write_into_later_calls(victim: DockerSandbox) -> None:
    injector = "while :; do for f in /proc/[0-9]*/fd/1; do echo INJECTED > $f; done 2>/dev/null; done"
    first = await victim.exec(f"(setsid bash -c '{injector}' </dev/null >/dev/null 2>&1 &); echo started")
    assert first.output == "started\n"
    for _ in range(5):
        later = await victim.exec("sleep 0.3; echo clean")
        assert later.output == "clean\n", later.output
    mine = await victim.exec("ps -u $(id -u) -o stat=,comm= | grep -v '^Z' | sort | uniq -c")
    assert "sleep" not in mine.output and "setsid" not in mine.output
    assert mine.output.count("bash") <= 1  # this command's own shell


async def test_daemonised_survivors_are_gone_when_the_call_ends(victim: DockerSandbox) -> None:
    await victim.exec("nohup sleep 300 >/dev/null 2>&1 & setsid sleep 301 </dev/null >/dev/null 2>&1 &")
    # Killed processes may linger a moment as zombies until init reaps them: count live ones only.
    left = await victim.exec("ps -u $(id -u) -o stat=,comm= | grep -v '^Z' | grep -c sleep; true")
    assert left.output.strip() == "0", left.output


async def test_unreadable_files_do_not_break_the_export(victim: DockerSandbox) -> None:
    await victim.exec("rm -rf /workspace/*; echo kept > kept.txt; touch .cache && chmod 000 .cache")
    await victim.exec("mkdir locked && echo x > locked/f && chmod 000 locked")
    archive = await victim.export_workspace()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        names = tar.getnames()
    assert "./kept.txt" in names
    await victim.exec("chmod 755 locked; rm -rf locked .cache")
