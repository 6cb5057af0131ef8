"""rlguard's own seccomp profile, the one every sandbox gets by default.

Everything a container escape or a kernel attack typically starts from is refused with EPERM: new
namespaces (``unshare``, ``setns``, namespace flags on ``clone``), mounts, ``ptrace`` and
cross-process memory or fd access, keyrings, BPF, perf, userfaultfd, io_uring (a large kernel attack
surface that engines' default profiles allow), module and kexec loading, clock or swap changes, and
``socket(AF_VSOCK)``: vsock talks to the hypervisor and other VMs and is not covered by the network
namespace. ``clone3`` answers ENOSYS so libc falls back to ``clone``, whose flags can be checked.
The engine's own default profile is used only when asked for (``seccomp: engine``, or ``auto`` with
the engine's default in force).
"""

from __future__ import annotations

import json
from functools import lru_cache

EPERM = 1
ENOSYS = 38

DENIED = (
    "unshare",
    "setns",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "open_by_handle_at",
    "name_to_handle_at",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "lookup_dcookie",
    "iopl",
    "ioperm",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "syslog",
    "personality",
    "pidfd_getfd",
    "process_madvise",
    "move_pages",
    "migrate_pages",
)

AF_VSOCK = 40

# clone(2) flags that create namespaces (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET).
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


@lru_cache(maxsize=1)
def profile_json() -> str:
    """The profile as the JSON text Docker's ``security_opt seccomp=<json>`` expects."""
    rules: list[dict] = [{"names": list(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM}]
    rules.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS})
    rules.append(
        {
            "names": ["socket", "socketpair"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": EPERM,
            "args": [{"index": 0, "value": AF_VSOCK, "op": "SCMP_CMP_EQ"}],
        }
    )
    for flag in NAMESPACE_FLAGS:
        rules.append(
            {
                "names": ["clone"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": EPERM,
                "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
            }
        )
    profile = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64"],
        "syscalls": rules,
    }
    return json.dumps(profile, separators=(",", ":"))


def engine_default_in_force(security_options: list[str] | None) -> bool:
    """Whether ``docker info``'s SecurityOptions say the built-in default seccomp profile applies."""
    for option in security_options or []:
        fields = dict(part.split("=", 1) for part in option.split(",") if "=" in part)
        if fields.get("name") == "seccomp":
            return fields.get("profile") in ("default", "builtin")
    return False
