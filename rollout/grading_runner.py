"""The in-container grading runner, copied into a fresh grading sandbox as ``/tmp/grader/runner.py``.

Two processes, both started with ``python3 -I -B`` (no PYTHON* variables, no user site, no script
or working directory on ``sys.path``, no bytecode writes), so ``sitecustomize``/``usercustomize``
and ``.pth`` files in the workspace never run:

* the **parent** reads its one-shot config (with a nonce) and deletes it, starts the child with a
  clean environment, collects the child's event stream from a private pipe and the JUnit XML from a
  random directory outside the workspace, and prints one line ``RLGUARD-GRADE <nonce> {json}``.
  It never imports workspace code.
* the **child** runs pytest with the grader's own ini (``-c``), rootdir and test paths under
  ``/tmp/grader``, no conftest files, no plugin autoload, no cache. ``/workspace`` joins
  ``sys.path`` only after collection finished, so every hidden test module is compiled before any
  workspace code can run. A plugin streams each test's reports to the parent and checks, at every
  report, that pytest's, unittest's, builtins' and time's functions and the hidden test modules'
  globals are the ones captured before workspace code ran.

The host (``rollout.grading``) decides the reward from this output, cross-checking the JUnit XML,
the event stream and the list of hidden tests it counted itself. Runs inside the sandbox image:
standard library + pytest only (pytest >= 7).
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import xml.etree.ElementTree as ET

RESULT_PREFIX = "RLGUARD-GRADE"
MAX_EVENT_BYTES = 4 * 1024 * 1024
MAX_JUNIT_BYTES = 8 * 1024 * 1024
OUTPUT_TAIL_BYTES = 4096
MESSAGE_CHARS = 300
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
}


# ----------------------------------------------------------------------------------------- parent
def _read_events(fd: int, sink: list) -> None:
    size = 0
    with os.fdopen(fd, "rb") as stream:
        for line in stream:
            size += len(line)
            if size > MAX_EVENT_BYTES:
                sink.append({"event": "overflow"})
                return
            try:
                sink.append(json.loads(line))
            except ValueError:
                sink.append({"event": "garbage"})


def _read_tail(stream, keep: int, sink: list) -> None:
    tail = b""
    for chunk in iter(lambda: stream.read(65536), b""):
        tail = (tail + chunk)[-keep:]
    sink.append(tail.decode("utf-8", "replace"))


def _parse_junit(path: str) -> tuple:
    """Test cases from the JUnit XML: ``[[classname, name, outcome, message], ...]`` or an error."""
    try:
        if os.path.getsize(path) > MAX_JUNIT_BYTES:
            return None, "junit xml too large"
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        return None, f"junit xml unreadable: {exc}"
    cases = []
    for case in root.iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or "")[:MESSAGE_CHARS]
                break
        cases.append([case.get("classname", ""), case.get("name", ""), outcome, message])
    return cases, None


def _summarise_events(events: list) -> dict:
    collected, reports, calls, tamper, anomalies = None, {}, {}, [], []
    finish, collect_errors = None, []
    for event in events:
        kind = event.get("event") if isinstance(event, dict) else None
        if kind == "collected":
            if collected is not None:
                anomalies.append("collected twice")
            collected = event.get("ids")
        elif kind == "report":
            per_test = reports.setdefault(str(event.get("id")), {})
            when = str(event.get("when"))
            if when in per_test:
                anomalies.append(f"duplicate {when} report for {event.get('id')}")
            per_test[when] = [event.get("outcome"), str(event.get("message", ""))[:MESSAGE_CHARS]]
        elif kind == "call":
            calls.setdefault(str(event.get("id")), []).append(bool(event.get("raised")))
        elif kind == "tamper":
            tamper.extend(event.get("what", []))
        elif kind == "collect_error":
            collect_errors.append([event.get("id"), str(event.get("message", ""))[:MESSAGE_CHARS]])
        elif kind == "finish":
            finish = event.get("exitstatus")
        else:
            anomalies.append(f"unexpected event {str(kind)[:40]}")
    return {
        "collected": collected,
        "reports": reports,
        "calls": calls,
        "tamper": sorted(set(tamper))[:50],
        "collect_errors": collect_errors[:20],
        "finish": finish,
        "anomalies": anomalies[:20],
    }


def parent(config_path: str) -> int:
    with open(config_path) as fh:
        config = json.load(fh)
    os.unlink(config_path)  # the nonce must not be readable once workspace code can run
    nonce = config["nonce"]
    out_dir = tempfile.mkdtemp(prefix="grader-out-", dir="/tmp")
    junit = os.path.join(out_dir, "junit.xml")
    read_fd, write_fd = os.pipe()
    child_spec = {key: config[key] for key in ("tests", "ini", "rootdir", "lib", "workspace")}
    child_spec.update(junit=junit, events_fd=write_fd)
    proc = subprocess.Popen(
        [sys.executable, "-I", "-B", os.path.abspath(__file__), "child", json.dumps(child_spec)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(write_fd,),
        env=CHILD_ENV,
        cwd=config["workspace"],
        start_new_session=True,
    )
    os.close(write_fd)
    events, tail = [], []
    readers = [
        threading.Thread(target=_read_events, args=(read_fd, events), daemon=True),
        threading.Thread(target=_read_tail, args=(proc.stdout, OUTPUT_TAIL_BYTES, tail), daemon=True),
    ]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        returncode = proc.wait(timeout=config["timeout_s"])
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        returncode = proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # daemons the tests left behind must not outlive grading
    except ProcessLookupError:
        pass
    for reader in readers:
        reader.join(timeout=5)
    cases, junit_error = _parse_junit(junit)
    result = {
        "returncode": returncode,
        "timed_out": timed_out,
        "junit": cases,
        "junit_error": junit_error,
        "events": _summarise_events(list(events)),
        "output_tail": tail[0] if tail else "",
    }
    sys.stdout.write(f"\n{RESULT_PREFIX} {nonce} {json.dumps(result, separators=(',', ':'))}\n")
    sys.stdout.flush()
    return 0


# ------------------------------------------------------------------------------------------ child
# fmt: off
_BUILTIN_NAMES = (
    "type", "isinstance", "issubclass", "len", "repr", "str", "int", "float", "bool", "all", "any",
    "zip", "map", "sorted", "range", "getattr", "setattr", "hasattr", "iter", "next", "abs", "min",
    "max", "sum", "list", "dict", "tuple", "set", "frozenset", "object", "super", "id", "hash",
    "print", "open", "__import__", "__build_class__", "exec", "eval", "compile", "AssertionError",
    "Exception", "BaseException", "SystemExit",
)
_TIME_NAMES = (
    "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
    "process_time", "sleep",
)
# fmt: on


def _members(obj) -> dict:
    """Callable members (functions, classes, descriptors) of a module or class, by name."""
    found = {}
    for name, value in list(vars(obj).items()):
        if callable(value) or isinstance(value, (property, staticmethod, classmethod)):
            found[name] = value
    return found


# Module globals that pytest itself swaps while tests run (assertion-message hooks).
_VOLATILE = {"_pytest.assertion.util._reprcompare", "_pytest.assertion.util._assertion_pass"}


def _watched_objects(test_modules: list) -> list:
    """``(label, object, names)`` whose callables must not change while tests run (names None: all)."""
    import builtins
    import importlib
    import time
    import unittest

    watched = [
        ("builtins", builtins, _BUILTIN_NAMES),
        ("time", time, _TIME_NAMES),
        ("unittest.TestCase", unittest.TestCase, None),
    ]
    for module_name in (
        "_pytest.runner",
        "_pytest.reports",
        "_pytest.python",
        "_pytest.main",
        "_pytest.junitxml",
        "_pytest.outcomes",
        "_pytest.skipping",
        "_pytest.unittest",
        "_pytest.assertion.rewrite",
        "_pytest.assertion.util",
        "pluggy._callers",
        "pluggy._hooks",
        "pluggy._manager",
        "pluggy._result",
        "pytest",
        "rlguard_checks",
        "__main__",
    ):
        try:
            module = sys.modules.get(module_name) or importlib.import_module(module_name)
        except ImportError:
            continue
        watched.append((module_name, module, None))
        for name, value in _members(module).items():
            if isinstance(value, type) and value.__module__ == module_name:
                watched.append((f"{module_name}.{name}", value, None))
    watched.extend((f"test module {m.__name__}", m, None) for m in test_modules)
    return watched


class _Snapshot:
    """Identities of watched callables (and of their code objects) taken before workspace code runs."""

    def __init__(self, watched: list) -> None:
        self._watched = watched
        self._ids = self._take()

    def _take(self) -> dict:
        ids = {}
        for label, obj, names in self._watched:
            members = _members(obj) if names is None else {n: getattr(obj, n, None) for n in names}
            for name, value in members.items():
                key = f"{label}.{name}"
                if key not in _VOLATILE:
                    ids[key] = (id(value), id(getattr(value, "__code__", None)))
        return ids

    def changed(self) -> list:
        now = self._take()
        return [key for key, ident in self._ids.items() if now.get(key) != ident]


class GraderPlugin:
    """Streams test events to the parent and reports tampering with the test machinery."""

    def __init__(self, events_fd: int, workspace: str) -> None:
        self._out = os.fdopen(events_fd, "w", buffering=1)
        self._workspace = workspace
        self._snapshot = None

    def _emit(self, event: dict) -> None:
        try:
            self._out.write(json.dumps(event) + "\n")
        except (OSError, ValueError):
            pass  # a closed stream shows up as missing results, which score zero

    def _check(self) -> None:
        if self._snapshot is None:
            return
        try:
            changed = self._snapshot.changed()
        except Exception as exc:  # a check broken by patched built-ins is itself evidence of tampering
            changed = [f"tamper check failed: {type(exc).__name__}"]
        if changed:
            self._emit({"event": "tamper", "what": changed[:50]})

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self._emit({"event": "collect_error", "id": report.nodeid, "message": str(report.longrepr)})

    def pytest_collection_finish(self, session) -> None:
        self._emit({"event": "collected", "ids": [item.nodeid for item in session.items]})
        modules = {id(m): m for m in (getattr(item, "module", None) for item in session.items) if m}
        self._snapshot = _Snapshot(_watched_objects(list(modules.values())))
        sys.path.insert(0, self._workspace)  # only now may tests import the agent's code

    def pytest_runtest_call(self, item):
        outcome = yield
        self._emit({"event": "call", "id": item.nodeid, "raised": outcome.excinfo is not None})

    def pytest_runtest_logreport(self, report) -> None:
        self._check()
        message = "" if report.passed else str(report.longrepr)[-1000:]
        self._emit(
            {
                "event": "report",
                "id": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "message": message,
            }
        )

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        self._check()
        self._emit({"event": "finish", "exitstatus": int(exitstatus)})


def child(spec_json: str) -> int:
    spec = json.loads(spec_json)
    sys.dont_write_bytecode = True
    sys.path.insert(0, spec["lib"])
    import pytest
    import rlguard_checks  # noqa: F401  (bound before workspace code can shadow or patch it)

    pytest.hookimpl(hookwrapper=True)(GraderPlugin.pytest_runtest_call)
    pytest.hookimpl(tryfirst=True)(GraderPlugin.pytest_runtest_logreport)
    pytest.hookimpl(trylast=True)(GraderPlugin.pytest_collection_finish)
    plugin = GraderPlugin(spec["events_fd"], spec["workspace"])
    args = [
        "-c", spec["ini"],
        "--rootdir", spec["rootdir"],
        "--noconftest",
        "-p", "no:cacheprovider",
        "-p", "no:stepwise",
        "--junitxml", spec["junit"],
        "-o", "junit_family=xunit2",
        "-q", "--tb=short", "--color=no",
        *spec["tests"],
    ]  # fmt: skip
    return int(pytest.main(args, plugins=[plugin]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "parent":
        sys.exit(parent(sys.argv[2]))
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        sys.exit(child(sys.argv[2]))
    sys.exit("usage: runner.py parent CONFIG.json | child SPEC-JSON")
