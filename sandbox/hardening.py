"""What every sandbox container is made with: the hardening in its host config, and what may be
unpacked into it as another uid than the agent's.

Every container gets: no network, a read-only root, size-capped tmpfs ``/workspace`` and ``/tmp``
(charged to the memory limit), agent commands as a uid of its own drawn from a range no host account
uses (the container's own init and keep-alive as ``nobody``), every capability dropped,
no-new-privileges, rlguard's seccomp profile, a pids limit, memory with swap equal to it, a CPU
quota, an init that reaps zombies, nofile/fsize ulimits, and host details masked in ``/proc``. Kept
apart from the backend so that what a container may do can be read in one place.
"""

from __future__ import annotations

import io
import tarfile
from typing import Any

from sandbox.base import SandboxError
from sandbox.paths import WORKSPACE
from sandbox.settings import SandboxLimits, parse_size

# The container's own processes (init and its ``sleep``) run as ``nobody``: the agent can ``kill -9
# -1`` all it likes without stopping its container; every exec names the sandbox's agent uid.
KEEPER_UID = "65534:65534"

# Docker's default masked paths, plus host details an agent has no use for: the host kernel's command
# line (boot flags, VM ports) and kernel symbol names. Setting MaskedPaths replaces the default list.
MASKED_PATHS = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/proc/cmdline",
    "/proc/kallsyms",
    "/proc/modules",
]


def host_config_kwargs(
    limits: SandboxLimits,
    seccomp_profile: str | None,
    uid: int,
    supervisor_uid: int | None = None,
    runtime: str = "runc",
) -> dict[str, Any]:
    """The hardening every sandbox container gets (arguments of ``create_host_config``).

    ``uid`` is the sandbox's own agent uid (owner of /workspace): per-uid kernel limits (inotify
    instances and watches, ``RLIMIT_NPROC``, keyring quotas, ...) are then never shared between
    sandboxes or with a host account, which sharing one uid such as 1000 would do. With a
    ``supervisor_uid`` (grading containers) that uid owns /workspace instead, sticky and writable by
    all: the agent's uid adds its own entries, and cannot remove or rename the supervisor's.

    ``runtime`` ``runsc`` puts gVisor's user-space kernel between the agent and the host; every
    other setting stays, because each still holds there (gVisor applies the mounts, limits,
    capabilities and ulimits itself; the seccomp profile is the one it does not apply in its 2022
    builds, where the host kernel is reached only through gVisor's own seccomp-filtered Sentry).
    One limit changes meaning: the pids cgroup also counts the Sentry's own host threads and, on
    the ptrace platform, a host thread per sandboxed thread; at ``pids`` the Sentry cannot start a
    thread and the whole sandbox dies. So under runsc the host cap is ``runsc_pids(limits)``, and
    the agent's own processes are capped inside by ``nproc`` (per agent uid, enforced by gVisor).
    """
    memory = limits.memory_bytes
    security = ["no-new-privileges:true"]
    if seccomp_profile is not None:
        security.append(f"seccomp={seccomp_profile}")
    tmpfs_opts = "rw,exec,nosuid,nodev"
    owner, mode = (uid, "0755") if supervisor_uid is None else (supervisor_uid, "1777")
    workspace_size = parse_size(limits.workspace_size)
    return {
        "runtime": runtime,
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {
            WORKSPACE: f"{tmpfs_opts},size={workspace_size},uid={owner},gid={owner},mode={mode}",
            "/tmp": f"{tmpfs_opts},size={parse_size(limits.tmp_size)},mode=1777",
        },
        "shm_size": 16 << 20,
        "cap_drop": ["ALL"],
        "security_opt": security,
        "pids_limit": runsc_pids(limits) if runtime == "runsc" else limits.pids,
        "mem_limit": memory,
        "memswap_limit": memory,
        "nano_cpus": int(limits.cpus * 1e9),
        "init": True,
        "ipc_mode": "private",
        "ulimits": [
            {"Name": "nofile", "Soft": limits.nofile, "Hard": limits.nofile},
            {"Name": "fsize", "Soft": limits.fsize_bytes, "Hard": limits.fsize_bytes},
            {"Name": "core", "Soft": 0, "Hard": 0},
            *([{"Name": "nproc", "Soft": limits.pids, "Hard": limits.pids}] if runtime == "runsc" else []),
        ],
    }


RUNSC_PIDS_OVERHEAD = 512  # the Sentry's Go runtime threads and the ptrace platform's stubs


def runsc_pids(limits: SandboxLimits) -> int:
    """The host pids cap of a gVisor sandbox: room for a host thread per sandboxed one, plus the
    Sentry's own (the agent is held to ``limits.pids`` inside by ``nproc``)."""
    return 16 * limits.pids + RUNSC_PIDS_OVERHEAD


SUPERVISOR_ROOTS = ("workspace", "tmp")


def check_supervisor_archive(archive: bytes) -> None:
    """Refuse a supervisor archive with a member outside ``/workspace`` and ``/tmp``, a link, a device
    or an absolute or ``..`` path: it is unpacked at ``/`` by a uid other than the agent's."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar:
                parts = member.name.split("/")
                if (
                    member.name.startswith("/")
                    or ".." in parts
                    or parts[0] not in SUPERVISOR_ROOTS
                    or not (member.isfile() or member.isdir())
                ):
                    raise SandboxError(f"supervisor archive member not allowed: {member.name[:200]!r}")
    except tarfile.TarError as exc:
        raise SandboxError(f"supervisor archive is not a tar archive: {exc}") from exc
