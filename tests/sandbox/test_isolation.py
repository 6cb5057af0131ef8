"""What an agent inside a sandbox must not reach: network, host, engine, other sandboxes, root.

Written as an attacker would try it. Egress is only ever tried against loopback: a listener this
test opens on the host's 127.0.0.1 must be unreachable from inside.
"""

import asyncio
import socket
import uuid
from pathlib import Path

import pytest

from sandbox.base import SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.docker_sandbox import DockerSandbox
from sandbox.settings import SandboxSettings
from tests.sandbox.conftest import small_limits

pytestmark = pytest.mark.docker

PY = "python3 -c"


async def test_only_loopback_interface_exists(shared: DockerSandbox) -> None:
    result = await shared.exec(f"{PY} 'import socket; print(sorted(n for _, n in socket.if_nameindex()))'")
    assert result.output.strip() == "['lo']"
    routes = await shared.exec("cat /proc/net/route | wc -l")
    assert routes.output.strip() == "1"  # header only: no route anywhere


async def test_host_loopback_listener_is_unreachable(shared: DockerSandbox) -> None:
    accepted: list[object] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        probe = (
            "import socket\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')\n"
            "except OSError as e:\n    print('refused', e.errno)\n"
        )
        result = await shared.exec(f"{PY} {_q(probe)}")
        assert "CONNECTED" not in result.output and "refused" in result.output
        await asyncio.sleep(0.2)
        assert accepted == []
    finally:
        server.close()
        await server.wait_closed()


async def test_no_dns_and_no_other_address_family_route(shared: DockerSandbox) -> None:
    # Name resolution has nowhere to go; only loopback sockets can be bound.
    result = await shared.exec(
        f'{PY} \'import socket\ntry:\n socket.getaddrinfo("localhost.invalid", 80); print("RESOLVED")\n'
        'except OSError: print("no-dns")\''
    )
    assert result.output.strip() == "no-dns"


async def test_host_files_and_docker_socket_are_invisible(shared: DockerSandbox, tmp_path: Path) -> None:
    marker = f"rlguard-host-secret-{uuid.uuid4().hex}"
    secret = Path("/tmp") / f"{marker}.txt"
    secret.write_text(marker)
    try:
        result = await shared.exec(
            "for s in /var/run/docker.sock /run/docker.sock; do"
            " [ -e $s ] && echo present $s || echo No such file $s; done;"
            f" find / -xdev -name '{marker}*' 2>/dev/null;"
            f" grep -rl {marker} /tmp /workspace 2>/dev/null; echo done"
        )
        assert marker not in result.output
        assert "present" not in result.output and "No such file" in result.output
        assert result.output.rstrip().endswith("done")
        sockets = await shared.exec("find / -xdev -type s 2>/dev/null | grep -v '^/proc' || true")
        assert sockets.output.strip() == ""
    finally:
        secret.unlink()


async def test_host_processes_are_invisible(shared: DockerSandbox) -> None:
    result = await shared.exec(
        "cat /proc/1/cmdline | tr '\\0' ' '; echo;"
        " python3 -c 'import os; print(sum(n.isdigit() for n in os.listdir(\"/proc\")))'"
    )
    first, count = result.output.splitlines()
    assert "docker-init" in first
    assert int(count) < 20


async def test_other_sandboxes_files_and_processes_are_invisible(
    backend: DockerBackend, shared: DockerSandbox, spec: SandboxSpec
) -> None:
    marker = f"neighbour-{uuid.uuid4().hex}"
    other = await backend.create(spec)
    try:
        await other.write_file(f"{marker}.txt", marker.encode())
        await other.exec(f"cp {marker}.txt /tmp/; (exec -a {marker} sleep 60 &)")
        seen = await shared.exec(
            f"find / -xdev -name '{marker}*' 2>/dev/null; ps -eo args | grep -c {marker}; ls /workspace"
        )
        assert marker not in seen.output.replace(f"grep -c {marker}", "")
        assert (await other.exec(f"cat /tmp/{marker}.txt")).output == marker
    finally:
        await other.destroy()


async def test_root_filesystem_is_read_only(shared: DockerSandbox) -> None:
    for path in ("/etc/passwd", "/usr/bin/rlguard-x", "/opt/x", "/root/x", "/var/x", "/home/x"):
        result = await shared.exec(f"touch {path} 2>&1 || mkdir {path} 2>&1; echo rc=$?")
        assert "rc=0" not in result.output, path
    proc = await shared.exec("echo 1 > /proc/sys/kernel/sysrq 2>&1; echo rc=$?")
    assert "rc=0" not in proc.output


async def test_not_root_and_no_capabilities(shared: DockerSandbox, sandbox_runtime: str) -> None:
    result = await shared.exec(
        "id -u; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status"
    )
    lines = result.output.split("\n")
    assert lines[0] == str(shared.uid) and shared.uid >= 2_000_000_000
    status = dict(line.split(":\t") for line in lines[1:] if line)
    caps = ("CapInh", "CapPrm", "CapEff", "CapBnd") + (("CapAmb",) if sandbox_runtime == "runc" else ())
    for cap in caps:  # gVisor's /proc has no CapAmb line (and no ambient capabilities)
        assert int(status[cap], 16) == 0, cap
    nnp = await shared.exec(f"{PY} " + _q("import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))"))
    assert nnp.output.strip() == "1"  # PR_GET_NO_NEW_PRIVS (gVisor's status file has no such line)
    if sandbox_runtime == "runc":  # runsc of 2022 applies no OCI seccomp profile (docs/sandbox.md)
        assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"


async def test_no_way_to_become_root(shared: DockerSandbox) -> None:
    setuid = await shared.exec("find / -xdev -type f -perm /6000 2>/dev/null")
    assert setuid.output == ""
    attempts = await shared.exec(
        "su -c id root </dev/null 2>&1; echo su=$?; sudo id 2>&1; echo sudo=$?;"
        f" {PY} "
        + _q('import os\ntry:\n os.setuid(0); print("ROOT")\nexcept OSError as e: print("setuid", e.errno)')
    )
    assert "uid=0" not in attempts.output and "ROOT" not in attempts.output
    assert "su=0" not in attempts.output and "sudo=0" not in attempts.output
    assert "setuid 1" in attempts.output


async def test_no_user_namespaces_and_no_mounts(shared: DockerSandbox, sandbox_runtime: str) -> None:
    result = await shared.exec(
        "unshare -Ur id 2>&1; echo userns=$?; unshare -Urm true 2>&1; echo mntns=$?;"
        " mkdir -p /tmp/m && mount -t tmpfs none /tmp/m 2>&1; echo mount=$?;"
        " unshare -n true 2>&1; echo netns=$?"
    )
    if sandbox_runtime == "runc":
        for probe in ("userns", "mntns", "mount", "netns"):
            assert f"{probe}=0" not in result.output, result.output
        assert "uid=0" not in result.output
        return
    # runsc: user and mount namespaces exist only in gVisor's own kernel (no OCI seccomp in its 2022
    # build); the agent's own namespaces still refuse mounts and new network namespaces, and
    # "root" of a gVisor user namespace still cannot write the read-only root or see the host.
    for probe in ("mount", "netns"):
        assert f"{probe}=0" not in result.output, result.output
    inside = await shared.exec(
        "unshare -Ur sh -c 'id -u; touch /usr/bin/sneaky || echo REFUSED' 2>&1"
    )
    assert inside.output.split()[0] == "0" and "REFUSED" in inside.output, inside.output
    assert not (await shared.exec("test -e /usr/bin/sneaky && echo THERE")).output


SYSCALL_PROBE = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(nr, *args)
    return 'ok' if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
print('unshare_user', call(272, 0x10000000))
print('unshare_mount', call(272, 0x00020000))
print('mount', call(165, b'none', b'/tmp', b'tmpfs', 0, None))
print('keyctl', call(250, 0, 0, 0, 0, 0))
print('bpf', call(321, 0, 0, 0))
print('ptrace_attach_init', call(101, 16, 1, 0, 0))
print('clone3', call(435, 0, 0))
"""


async def _syscalls(sandbox: DockerSandbox) -> dict[str, str]:
    result = await sandbox.exec(f"{PY} {_q(SYSCALL_PROBE)}")
    return dict(line.split() for line in result.output.strip().splitlines())


async def test_dangerous_syscalls_fail_under_engine_profile(
    shared: DockerSandbox, sandbox_runtime: str
) -> None:
    answers = await _syscalls(shared)
    # Docker's default profile allows ptrace of the sandbox's own processes (same uid, same pid
    # namespace: nothing of the host is reachable); rlguard's own profile denies it outright.
    answers.pop("ptrace_attach_init")
    if sandbox_runtime == "runsc":  # gVisor's own (emulated) namespaces: see test_no_user_namespaces
        answers.pop("unshare_user")
        answers.pop("unshare_mount")
    assert all(value != "ok" for value in answers.values()), answers


async def test_rlguard_seccomp_profile_denies_escape_syscalls(sandbox_image: str, instance: str) -> None:
    settings = SandboxSettings(image=sandbox_image, limits=small_limits(), seccomp="rlguard")
    own = DockerBackend(instance, None, settings)
    try:
        sandbox = await own.create(SandboxSpec(image=sandbox_image, limits=small_limits()))
        inspect = await own.call(own.client.api.inspect_container, sandbox.id)
        assert any(opt.startswith("seccomp=") for opt in inspect["HostConfig"]["SecurityOpt"])
        answers = await _syscalls(sandbox)
        assert answers["unshare_user"] == "EPERM" and answers["unshare_mount"] == "EPERM"
        assert answers["mount"] == "EPERM" and answers["keyctl"] == "EPERM" and answers["bpf"] == "EPERM"
        assert answers["ptrace_attach_init"] == "EPERM"
        assert answers["clone3"] == "ENOSYS"
        tools = await sandbox.exec("unshare -Ur id 2>&1; echo rc=$?; echo ok | cat")
        assert "rc=0" not in tools.output and tools.output.endswith("ok\n")
    finally:
        await own.close()


def _q(text: str) -> str:
    """Single-quote ``text`` for bash."""
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_quote_helper_roundtrip() -> None:
    assert _q("a'b") == "'a'\"'\"'b'"
    assert socket.gethostname()


async def test_host_kernel_details_are_masked(shared: DockerSandbox, sandbox_runtime: str) -> None:
    result = await shared.exec("for f in cmdline kallsyms; do echo $f=$(wc -c < /proc/$f 2>/dev/null); done")
    if sandbox_runtime == "runc":
        assert result.output.split() == ["cmdline=0", "kallsyms=0"]  # /dev/null bound over them
        return
    # gVisor's /proc is its own: a made-up kernel command line, no kernel symbols of the host's
    seen = await shared.exec("cat /proc/cmdline; echo; [ -s /proc/kallsyms ] && echo HAS-SYMBOLS")
    host = Path("/proc/cmdline").read_text().strip()
    assert host not in seen.output and "gvisor" in seen.output and "HAS-SYMBOLS" not in seen.output
    del result
