"""Escape probes the sandbox's own tests do not make, written as an attacker inside the sandbox.

Each test is one attack that held when the red team ran it; a failure here means the attack now
works. All probes share one real hardened sandbox (see conftest.py); the host side only opens
listeners on loopback or in the abstract unix namespace.
"""

import asyncio
import io
import shlex
import socket
import tarfile
import uuid

import pytest

from sandbox.base import PathEscapeError
from sandbox.docker_sandbox import DockerSandbox
from tests.redteam.conftest import PIDS_LIMIT

PY = "python3 -c"


async def run(sandbox: DockerSandbox, command: str) -> str:
    result = await sandbox.exec(command, timeout_s=20)
    assert not result.timed_out, command
    return result.output


async def test_kernel_tunables_in_proc_sys_are_not_writable(victim: DockerSandbox) -> None:
    out = await run(
        victim,
        "for f in /proc/sys/vm/drop_caches /proc/sys/kernel/core_pattern /proc/sysrq-trigger; do "
        "if echo 1 > $f; then echo WROTE $f; else echo refused $f; fi; done 2>/dev/null",
    )
    assert "WROTE" not in out
    assert out.count("refused") == 3


async def test_cgroup_files_and_release_agent_are_not_writable(victim: DockerSandbox) -> None:
    out = await run(
        victim,
        "cg=/sys/fs/cgroup; for f in $cg/memory/memory.limit_in_bytes $cg/memory/cgroup.procs "
        "$cg/pids/pids.max $cg/memory/release_agent $cg/memory/notify_on_release; do "
        "if echo 1 > $f; then echo WROTE $f; else echo refused; fi; done 2>/dev/null; "
        "mkdir $cg/memory/x 2>/dev/null && echo MADE || echo refused",
    )
    assert "WROTE" not in out and "MADE" not in out
    assert out.count("refused") == 6


async def test_kernel_keyring_is_closed(victim: DockerSandbox) -> None:
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.syscall(248, b'user', b'rt', b'secret', 6, -3)\n"  # add_key into the session keyring
        "print('add_key', r, os.strerror(ctypes.get_errno()))\n"
    )
    out = await run(victim, f"{PY} {shlex.quote(probe)}")
    assert out.startswith("add_key -1"), out


async def test_no_namespace_or_identity_change_tools_work(
    victim: DockerSandbox, sandbox_runtime: str
) -> None:
    out = await run(
        victim,
        "for c in 'unshare -r id' 'unshare -n true' 'unshare -m true' 'setpriv --reuid=0 id' "
        "'setpriv --inh-caps=+sys_admin true' 'nsenter -t 1 -m true'; do "
        "if $c >/dev/null 2>&1; then echo WORKED $c; else echo refused; fi; done",
    )
    if sandbox_runtime == "runsc":  # a user namespace of gVisor's own kernel; nothing else works
        assert out.replace("WORKED unshare -r id", "").count("WORKED") == 0 and out.count("refused") == 5
        return
    assert "WORKED" not in out
    assert out.count("refused") == 6


async def test_no_setuid_binaries_and_writable_mounts_are_nosuid_nodev(
    victim: DockerSandbox, sandbox_runtime: str
) -> None:
    setuid = await run(victim, "find / -xdev -type f \\( -perm -4000 -o -perm -2000 \\) 2>/dev/null")
    assert setuid.strip() == ""
    if sandbox_runtime == "runsc":
        # gVisor's mountinfo does not list nosuid/nodev; what they guard holds: a set-uid copy made
        # in /tmp runs as the agent (no-new-privileges), a device node made there opens nothing
        out = await run(
            victim, "cp /usr/bin/id /tmp/sid && chmod u+s /tmp/sid && /tmp/sid -u; rm -f /tmp/sid"
        )
        assert out.strip() == str(victim.uid)
        return
    mounts = await run(victim, "cat /proc/self/mountinfo")
    for target in ("/workspace", "/tmp", "/dev/shm"):
        line = next(line for line in mounts.splitlines() if line.split()[4] == target)
        options = line.split()[5].split(",")
        assert "nosuid" in options and "nodev" in options, line


async def test_only_workspace_tmp_shm_and_standard_devices_are_writable(
    victim: DockerSandbox, sandbox_runtime: str
) -> None:
    allowed = {
        "/dev/stderr", "/dev/stdout", "/dev/stdin", "/dev/fd", "/dev/ptmx", "/dev/urandom", "/dev/zero",
        "/dev/tty", "/dev/full", "/dev/random", "/dev/null", "/dev/mqueue", "/dev/pts/ptmx",
    }  # fmt: skip
    if sandbox_runtime == "runsc":  # gVisor's own emulated devices (no network: tun reaches nothing)
        allowed |= {"/dev/fuse", "/dev/net/tun"}
    out = await run(
        victim,
        "find / \\( -path /proc -o -path /sys -o -path /workspace -o -path /tmp -o -path /dev/shm \\) -prune "
        "-o -writable -print 2>/dev/null",
    )
    writable = {line for line in out.splitlines() if line}
    assert writable <= allowed, sorted(writable - allowed)


async def test_no_block_devices_and_mknod_fails(victim: DockerSandbox, sandbox_runtime: str) -> None:
    out = await run(
        victim, "find /dev -type b | wc -l; mknod /tmp/sda b 8 0 2>&1 && echo MADE || echo refused"
    )
    lines = out.split()
    assert lines[0] == "0"
    if sandbox_runtime == "runsc":  # gVisor lets the node be made; there is no disk behind it
        opened = await run(victim, "head -c 1 /tmp/sda 2>&1; rm -f /tmp/sda")
        assert "No such device" in opened, opened
        return
    assert "MADE" not in out and "refused" in out


async def test_init_cannot_be_signalled_traced_or_read(victim: DockerSandbox) -> None:
    probe = (
        "import ctypes, os, signal\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):\n"
        "    try:\n        os.kill(1, sig); print('SIGNALLED', sig)\n"
        "    except PermissionError:\n        print('refused')\n"
        "print('ptrace', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"
        "for f in ('/proc/1/environ', '/proc/1/mem', '/proc/1/root/etc/hostname'):\n"
        "    try:\n        open(f, 'rb').read(1); print('READ', f)\n"
        "    except OSError:\n        print('refused')\n"
    )
    out = await run(victim, f"{PY} {shlex.quote(probe)}")
    if victim._backend.settings.runtime == "runsc":
        # gVisor lets /proc/1/environ be read: it holds the image's variables only, no secret
        environ = await run(victim, "tr '\\0' '\\n' < /proc/1/environ | cut -d= -f1 | sort | tr '\\n' ' '")
        info = await victim._backend.call(victim._backend.client.api.inspect_container, victim.id)
        image_env = {item.split("=", 1)[0] for item in info["Config"]["Env"] or []}
        assert set(environ.split()) <= image_env | {"HOSTNAME", "HOME", "TERM"}, environ
        out = out.replace("READ /proc/1/environ", "refused")
    assert "SIGNALLED" not in out and "READ" not in out
    assert out.count("refused") == 6
    assert "ptrace -1 1" in out  # EPERM
    assert (await run(victim, "ps -o stat= -p 1")).strip().startswith("S")


async def test_detached_background_processes_die_with_their_command(victim: DockerSandbox) -> None:
    await run(
        victim,
        "setsid sleep 3001 >/dev/null 2>&1 </dev/null & disown; (nohup sleep 3002 >/dev/null 2>&1 &); "
        f"{PY} 'import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(3003)\n    os._exit(0)'",
    )
    out = await run(victim, "ps -eo args")
    assert "sleep 300" not in out and "time.sleep(3003)" not in out


async def test_dev_shm_fill_stops_at_its_cap(victim: DockerSandbox) -> None:
    out = await run(
        victim,
        "head -c 64M /dev/zero > /dev/shm/fill 2>/dev/null; echo rc=$?; wc -c < /dev/shm/fill; "
        "rm -f /dev/shm/fill",
    )
    rc, size = out.split()
    assert rc != "rc=0"
    assert int(size) <= 16 << 20


async def test_inode_flood_is_charged_to_the_memory_cgroup(
    victim: DockerSandbox, sandbox_runtime: str
) -> None:
    """tmpfs has no inode cap here, so the memory cgroup must be what bounds an inode flood."""
    if sandbox_runtime == "runsc":  # gVisor's inodes live in the Sentry, inside the memory cgroup
        host = await victim._backend.call(victim._backend.client.api.inspect_container, victim.id)
        assert host["HostConfig"]["Memory"] == victim.limits.memory_bytes
        out = await run(
            victim,
            f'{PY} \'import os\nos.mkdir("/tmp/i")\nfor i in range(20000):\n'
            '    os.close(os.open(f"/tmp/i/{i}", os.O_CREAT | os.O_WRONLY))\nprint("made")\'; rm -rf /tmp/i',
        )
        assert "made" in out
        return
    usage = "cat /sys/fs/cgroup/memory/memory.kmem.usage_in_bytes"
    out = await run(
        victim,
        f'{usage}; {PY} \'import os\nos.mkdir("/tmp/i")\nfor i in range(20000):\n'
        '    os.close(os.open(f"/tmp/i/{i}", os.O_CREAT | os.O_WRONLY))\'; '
        f"{usage}; rm -rf /tmp/i",
    )
    before, after = (int(v) for v in out.split())
    assert after - before >= 20000 * 256, (before, after)


async def test_threads_are_bounded_by_the_pids_limit(victim: DockerSandbox) -> None:
    probe = (
        "import threading, time\nn = 0\ntry:\n    for _ in range(2000):\n"
        "        threading.Thread(target=time.sleep, args=(2,), daemon=True).start(); n += 1\n"
        "except RuntimeError:\n    pass\nprint(n)\n"
    )
    started = int((await run(victim, f"{PY} {shlex.quote(probe)}")).strip())
    assert 0 < started < PIDS_LIMIT


async def test_open_file_limit_cannot_be_raised(victim: DockerSandbox) -> None:
    out = await run(victim, "ulimit -n $(($(ulimit -Hn) * 4)) 2>/dev/null && echo RAISED || echo refused")
    assert out.strip() == "refused"


async def test_huge_argv_fails_in_the_kernel_and_the_sandbox_keeps_working(victim: DockerSandbox) -> None:
    result = await victim.exec("/bin/true $(head -c 3000000 /dev/zero | tr '\\0' a)", timeout_s=20)
    refusal = "Argument list too long" if victim._backend.settings.runtime == "runc" else "too long"
    assert result.exit_code == 126 and refusal in result.output  # gVisor: "File name too long"
    assert (await run(victim, "echo alive")).strip() == "alive"


async def test_clock_cannot_be_set(victim: DockerSandbox) -> None:
    out = await run(victim, "date -s '2030-01-01' >/dev/null 2>&1 && echo SET || echo refused; date +%Y")
    assert out.split()[0] == "refused"
    assert out.split()[1] != "2030"


async def test_kernel_memory_and_scheduler_views_are_masked(victim: DockerSandbox) -> None:
    out = await run(
        victim,
        "for f in /proc/kcore /proc/sched_debug /proc/timer_list /proc/keys; do "
        "cat $f 2>/dev/null | wc -c; done; "
        "grep -vc '^0000000000000000 ' /proc/kallsyms; "
        "dmesg >/dev/null 2>&1 || echo refused",
    )
    if victim._backend.settings.runtime == "runsc":  # gVisor's /proc: its own, none of these is the host's
        out = await run(
            victim,
            "for f in /proc/kcore /proc/sched_debug /proc/timer_list /proc/keys; do "
            "{ cat $f 2>/dev/null || true; } | wc -c; done; "
            "{ grep -vc '^0000000000000000 ' /proc/kallsyms 2>/dev/null || true; }"
            " | tail -1 | grep . || echo 0; "
            "dmesg 2>/dev/null | grep -qi gvisor && echo refused",  # gVisor's own made-up boot log
        )
    *masked, nonzero_symbols, dmesg = out.split()
    assert masked == ["0", "0", "0", "0"]  # absent or masked: nothing readable
    assert nonzero_symbols == "0"  # symbol addresses are hidden
    assert dmesg == "refused"


async def test_host_abstract_unix_socket_is_unreachable(victim: DockerSandbox) -> None:
    name = f"rlguard-redteam-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen()
    server.setblocking(False)
    try:
        probe = (
            "import socket\ns = socket.socket(socket.AF_UNIX)\n"
            f"try:\n    s.connect('\\0{name}'); print('CONNECTED')\n"
            "except OSError as e:\n    print('refused', e.errno)\n"
        )
        out = await run(victim, f"{PY} {shlex.quote(probe)}")
        assert "CONNECTED" not in out and "refused" in out
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


async def test_host_ipv6_loopback_listener_is_unreachable(victim: DockerSandbox) -> None:
    if not socket.has_ipv6:
        pytest.skip("this host has no IPv6")
    accepted: list[object] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername"))
        writer.close()

    try:
        server = await asyncio.start_server(on_connect, "::1", 0)
    except OSError:
        pytest.skip("::1 is not configured on this host")
    port = server.sockets[0].getsockname()[1]
    try:
        probe = (
            "import socket\n"
            f"try:\n    socket.create_connection(('::1', {port}), timeout=3); print('CONNECTED')\n"
            "except OSError as e:\n    print('refused', e.errno)\n"
        )
        out = await run(victim, f"{PY} {shlex.quote(probe)}")
        assert "CONNECTED" not in out and "refused" in out
        await asyncio.sleep(0.2)
        assert accepted == []
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    "path",
    [
        "rootlink/etc/passwd",
        "rootlink",
        "etc_link/passwd",
        "/workspace/../etc/passwd",
        "deep/a/../../../etc/passwd",
    ],
)
async def test_file_api_refuses_links_to_proc_root_and_etc(victim: DockerSandbox, path: str) -> None:
    await run(
        victim,
        "cd /workspace && ln -sfn /proc/self/root rootlink && ln -sfn /etc etc_link && mkdir -p deep/a",
    )
    with pytest.raises(PathEscapeError):
        await victim.read_file(path)
    with pytest.raises(PathEscapeError):
        await victim.write_file(path, b"owned")


async def test_export_keeps_links_as_links_and_carries_no_host_file(victim: DockerSandbox) -> None:
    await run(
        victim,
        "cd /workspace && mkdir -p exp && ln -sfn /etc/passwd exp/pw && ln -sfn /proc/self/root exp/root "
        "&& echo data > exp/real && ln -f exp/real exp/hard && rm -f exp/fifo && mkfifo exp/fifo",
    )
    archive = await victim.export_workspace()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = {m.name.removeprefix("./"): m for m in tar.getmembers()}
        contents = b"".join(tar.extractfile(m).read() for m in members.values() if m.isfile())
    assert members["exp/pw"].issym() and members["exp/pw"].linkname == "/etc/passwd"
    assert members["exp/root"].issym()
    assert members["exp/fifo"].isfifo()
    assert b"root:x:0:0" not in contents
    assert all(not m.name.startswith("/") and ".." not in m.name.split("/") for m in members.values())


async def test_commands_inherit_only_stdin_stdout_stderr(victim: DockerSandbox) -> None:
    """No runner descriptor (its command channel to the host) leaks into an agent's command."""
    out = await run(victim, f"{PY} 'import os; print(sorted(int(f) for f in os.listdir(\"/proc/self/fd\")))'")
    assert out.strip() == "[0, 1, 2, 3]"  # 3 is the listing's own directory handle
