"""Who owns a sandbox container, and whether that owner still lives: the basis of leak-free gc.

Every container carries labels naming its rlguard instance and its owner: host name, boot id, pid,
the pid's start time (so a recycled pid is not mistaken for the owner) and a per-backend token (so
two backends in one process never collect each other's sandboxes). A container whose owner is dead
is an orphan; gc removes orphans of its own instance. Containers made on another host (a shared
remote engine) are never judged: their owner cannot be checked from here.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

LABEL_PREFIX = "rlguard."
INSTANCE = "rlguard.instance"
EPISODE = "rlguard.episode"
ROLE = "rlguard.role"
POOLED = "rlguard.pooled"
OWNER_HOST = "rlguard.owner_host"
OWNER_BOOT = "rlguard.owner_boot"
OWNER_PID = "rlguard.owner_pid"
OWNER_START = "rlguard.owner_start"
OWNER_TOKEN = "rlguard.owner_token"
AGENT_UID = "rlguard.agent_uid"  # so a gateway that takes an episode over can run as its agent

#: Tokens of backends alive in this process (a backend removes its token when closed).
LIVE_TOKENS: set[str] = set()


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start_ticks(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or None when no such process exists."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return int(fields[19])


def owner_labels(instance: str, token: str) -> dict[str, str]:
    """Labels naming this process (and the backend ``token``) as a container's owner."""
    pid = os.getpid()
    return {
        INSTANCE: instance,
        ROLE: "sandbox",
        OWNER_HOST: socket.gethostname(),
        OWNER_BOOT: _boot_id(),
        OWNER_PID: str(pid),
        OWNER_START: str(process_start_ticks(pid) or 0),
        OWNER_TOKEN: token,
    }


def owner_alive(labels: dict[str, str]) -> bool:
    """False only when the owner is certainly gone; unknown owners (other hosts) count as alive."""
    if labels.get(OWNER_HOST) != socket.gethostname():
        return True
    if labels.get(OWNER_BOOT) != _boot_id():
        return False
    try:
        pid, start = int(labels[OWNER_PID]), int(labels[OWNER_START])
    except (KeyError, ValueError):
        return False
    if pid == os.getpid() and process_start_ticks(pid) == start:
        return labels.get(OWNER_TOKEN) in LIVE_TOKENS
    return process_start_ticks(pid) == start
