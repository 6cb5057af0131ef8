"""The red team's grading forgeries (docs/redteam.md, G1 and G2) against the fixed grader.

Both used to turn ``builtin/roman-numerals``'s unsolved workspace (reward 0.0) into 1.0. Workspace
code now runs only in the untrusted worker process; the verdict comes from the trusted runner,
which is non-dumpable and the only writer of its stdout. Each attack is prepended to
``numerals/__init__.py``, which the hidden tests import, and must score 0.0:

* ``ORIGINAL_VIA_PARENT`` / ``ORIGINAL_OWN_CHANNELS``: the red team's reproductions, verbatim;
* ``FORGE_VIA_PARENT`` (G1 for the new layout): find the nonce in the grading parent's memory,
  write nonce-tagged per-test and summary lines through its stdout, SIGKILL it;
* ``FORGE_OWN_CHANNELS`` (G2 for the new layout): flood every channel the worker holds or can open
  with forged result lines, rewrite whatever grader files it can reach, then exit.

Run ``.venv/bin/pytest tests/redteam/test_grading_forge.py`` (five gradings), or
``.venv/bin/python -m tests.redteam.test_grading_forge`` for the reward table.
"""

import asyncio
import io
import tarfile
import uuid

import docker
import pytest

from sandbox.docker_backend import DockerBackend
from sandbox.image import ensure_image
from sandbox.settings import SandboxSettings
from tasks.grading.isolated import GradeResult, grade
from tasks.spec import Task, load_suite

pytestmark = pytest.mark.docker

TASK_ID = "builtin/roman-numerals"
PACKAGE_INIT = "numerals/__init__.py"

ORIGINAL_VIA_PARENT = r"""
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


ORIGINAL_OWN_CHANNELS = r"""
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


FORGE_VIA_PARENT = r"""
def _forge():
    import json, os, re, signal
    ppid = os.getppid()
    nonces = []
    try:  # step 1: the nonce from the grading parent's heap
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
                nonces += [m.decode() for m in re.findall(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", chunk)]
    except OSError as exc:
        print("G1: parent memory:", exc, file=__import__("sys").stderr)
    names = ("test_known_values", "test_round_trip", "test_non_canonical_rejected", "test_garbage_rejected")
    ids = [f"test_from_roman.py::{name}" for name in names]
    lines = [json.dumps({"kind": "test", "id": i, "outcome": "passed", "message": ""}) for i in ids]
    lines.append(json.dumps({"kind": "summary", "collected": ids, "exitstatus": 0, "timed_out": False}))
    candidates = list(dict.fromkeys(nonces))[:50] + ["0" * 32]
    text = "".join(f"\nRLGUARD-GRADE {n} {line}\n" for n in candidates for line in lines)
    try:  # step 2: the parent's stdout, the channel back to the host
        with open(f"/proc/{ppid}/fd/1", "w") as out:
            out.write(text)
    except OSError as exc:
        print("G1: parent stdout:", exc, file=__import__("sys").stderr)
    os.kill(ppid, signal.SIGKILL)  # step 3: its real summary never comes
    os._exit(0)

_forge()
"""

FORGE_OWN_CHANNELS = r"""
def _forge_own_channels():
    import glob, json, os
    names = ("test_known_values", "test_round_trip", "test_non_canonical_rejected", "test_garbage_rejected")
    ids = [f"test_from_roman.py::{name}" for name in names]
    lines = [json.dumps({"kind": "test", "id": i, "outcome": "passed", "message": ""}) for i in ids]
    lines.append(json.dumps({"kind": "summary", "collected": ids, "exitstatus": 0, "timed_out": False}))
    text = "".join(f"\nRLGUARD-GRADE {'0' * 32} {line}\n" for line in lines).encode()
    for fd in range(256):  # every descriptor the worker holds, its RPC pipe included
        try:
            os.write(fd, text)
        except OSError:
            pass
    ppid = os.getppid()
    for path in glob.glob(f"/proc/{ppid}/fd/*") + glob.glob("/tmp/grader/**", recursive=True):
        try:  # the parent's descriptors (pytest's capture files, its stdout) and the grader's files
            with open(path, "ab") as out:
                out.write(text)
        except OSError:
            pass
    os._exit(0)

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


async def untouched_and_forged(runtime: str = "runc") -> list[tuple[str, GradeResult]]:
    """Grade the unsolved workspace as shipped, then with each forgery prepended to the package."""
    client = docker.from_env()
    image = ensure_image(client)
    client.close()
    settings = SandboxSettings(image=image, runtime=runtime)
    backend = DockerBackend(f"test-redteam-forge-{uuid.uuid4().hex[:6]}", None, settings)
    task = {t.id: t for t in load_suite("builtin")}[TASK_ID]
    original = (task.workspace_dir / PACKAGE_INIT).read_text()
    jobs = [("untouched", task.workspace_tar())]
    jobs += [
        (name, workspace_with(task, {PACKAGE_INIT: forge + "\n" + original})) for name, forge in FORGERIES
    ]
    gate = asyncio.Semaphore(len(jobs))

    async def one(archive: bytes) -> GradeResult:
        async with gate:
            return await grade(backend, task, archive)

    try:
        graded = await asyncio.gather(*(one(archive) for _, archive in jobs))
        assert backend.owned_ids() == []
    finally:
        await backend.close()
    return [(name, result) for (name, _), result in zip(jobs, graded, strict=True)]


FORGERIES = [
    ("original-via-parent", ORIGINAL_VIA_PARENT),
    ("original-own-channels", ORIGINAL_OWN_CHANNELS),
    ("via-parent", FORGE_VIA_PARENT),
    ("own-channels", FORGE_OWN_CHANNELS),
]


async def test_forgeries_score_zero(sandbox_runtime: str):
    """Under runc and under gVisor's runsc (whose /proc lets the same uid open a non-dumpable
    process's file descriptors: the forgeries through the parent's channel must still fail)."""
    results = dict(await untouched_and_forged(sandbox_runtime))
    table = {name: (r.reward, r.details.get("reason")) for name, r in results.items()}
    assert table["untouched"] == (0.0, "graded"), table
    for name, _ in FORGERIES:
        assert results[name].reward == 0.0 and results[name].passed == 0, table
    # The red team's first step, reading the parent's memory, is refused: the runner is non-dumpable.
    messages = results["original-via-parent"].details["messages"].values()
    assert all("PermissionError" in message for message in messages), messages
    # Killing the grading parent leaves no summary: that is a zero, never a partial result.
    assert table["via-parent"] == (0.0, "grader produced no result"), table
    # The worker's own channels reach nothing the host reads: the tests simply fail.
    assert table["own-channels"] == (0.0, "graded"), table


def main() -> None:
    for name, result in asyncio.run(untouched_and_forged()):
        reason = result.details.get("reason")
        print(f"{name:22} reward={result.reward} passed={result.passed}/{result.total} {reason}")


if __name__ == "__main__":
    main()
