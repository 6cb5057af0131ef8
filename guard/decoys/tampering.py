"""Decoys for calls that tamper with tests, the grader or the sandbox itself.

Writes that would weaken grading succeed in silence, as such commands do (grading runs on pristine
tests anyway, so nothing needs to be written). Escape attempts fail the way an unprivileged user in
a container sees them fail.
"""

from __future__ import annotations

from guard.decoys.shell import SHELL_LINE_1, args_of, command_not_found, has_flag, positionals
from guard.types import Command, ToolAnswer

CONTAINER_CLIS = frozenset({"docker", "podman", "nerdctl", "ctr", "crictl", "kubectl"})
NOT_PERMITTED = "Operation not permitted"


def tamper_decoy(command: Command) -> ToolAnswer:
    """The normal, mostly silent success of a file-changing command."""
    program = command.program
    args = args_of(command)
    if program == "rm" and has_flag(args, "v", "--verbose"):
        return ToolAnswer("\n".join(f"removed '{p}'" for p in positionals(args)), 0)
    if program == "mv" and has_flag(args, "v", "--verbose"):
        pos = positionals(args)
        if len(pos) >= 2:
            return ToolAnswer("\n".join(f"renamed '{p}' -> '{pos[-1]}'" for p in pos[:-1]), 0)
    if program == "git":
        pos = positionals(args, frozenset({"-C", "-c"}))
        if pos and pos[0] == "rm" and not has_flag(args, "q", "--quiet"):
            return ToolAnswer("\n".join(f"rm '{p}'" for p in pos[1:]), 0)
    return ToolAnswer("", 0)


def escape_decoy(command: Command, path: str | None, installed: bool | None) -> ToolAnswer:
    """How a sandbox escape fails for an unprivileged user in a container without engine sockets.

    ``installed`` is what a probe said about the program (None: no probe ran); container CLIs are
    assumed absent from the sandbox image unless a probe found them.
    """
    program = command.program
    args = args_of(command)
    pos = positionals(args)
    if program in CONTAINER_CLIS:
        if not installed:
            return command_not_found(program)
        return ToolAnswer(
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
            "Is the docker daemon running?",
            1,
        )
    if program == "nsenter":
        return ToolAnswer(f"nsenter: reassociate to namespace 'ns/ipc' failed: {NOT_PERMITTED}", 1)
    if program in ("mount", "umount"):
        target = pos[-1] if pos else "/mnt"
        verb = "mount" if program == "mount" else "unmount"
        return ToolAnswer(f"{program}: {target}: must be superuser to use {verb}.", 32)
    if program == "chroot":
        return ToolAnswer(
            f"chroot: cannot change root directory to '{pos[0] if pos else '/'}': {NOT_PERMITTED}", 125
        )
    if program == "unshare":
        return ToolAnswer(f"unshare: unshare failed: {NOT_PERMITTED}", 1)
    if program == "insmod":
        module = pos[0] if pos else "module.ko"
        return ToolAnswer(f"insmod: ERROR: could not insert module {module}: {NOT_PERMITTED}", 1)
    if path and path.startswith(("/sys/", "/proc/")):  # mounted read-only in the container
        return ToolAnswer(f"{SHELL_LINE_1}{path}: Read-only file system", 1)
    if program.startswith("python") or program in ("perl", "ruby", "node"):
        return ToolAnswer("", 0)  # raw syscalls from code fail with a return code nobody prints
    return ToolAnswer(f"{program}: {NOT_PERMITTED}", 1)
