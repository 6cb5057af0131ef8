"""Runs in the grading container (``pytest`` mode) as the test process: the project's pytest, watched.

Started once per grading by the supervisor (``inside/supervisor.py``) as ``python3 -I -B
launcher.py <config>``, with a clean environment (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``), the report
socket on descriptor 3 and the life line on descriptor 4. Its files, its config, the tests and the
test configuration belong to another uid than the one it runs as: nothing it runs can rewrite them.
In order, before any workspace module can be imported:

1. the monitor's audit hook is installed (``inside/monitor.py``); the two descriptors become
   close-on-exec, so a subprocess never holds them and an ``exec`` of this process closes the life
   line; a ``start`` record goes out;
2. the pytest plugins the *image* installs (``pytest11`` entry points) are listed, to be loaded by
   name with ``-p``: the project's usual plugins run, a plugin the agent declared never does;
3. a top-level module the agent added that the image also provides (a new ``hypothesis.py`` or
   ``difflib.py``) stops the run: the report names it and the host scores zero;
4. pytest, its built-in plugins and unittest are imported and the monitor takes its snapshot of
   them (``rlguard.check`` compares at session start, after collection, after each test and at the
   end, with the plugin manager's outcome-deciding hooks too);
5. the workspace goes first on ``sys.path`` (and into ``PYTHONPATH`` for subprocesses), as with
   ``python -m pytest`` from the repository root, and pytest runs the test files with the report
   plugin registered before any conftest or test module loads.

Records (one JSON object per socket message, all relayed by the monitor's hook): ``start``,
``collected`` (one per node id, before any test runs), ``test`` (outcome as junit counts it),
``collect_error``, ``finding`` (the monitor), ``end`` (pytest's exit status), ``exit`` (this
process's exit code, with the monitor's counts). Standard library and pytest only.
"""

import json
import os
import sys

# -I leaves the script's own directory (the grader's, another uid's) off sys.path: put it back.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

REPORT_FD, LIFELINE_FD = 3, 4
MESSAGE_CHARS = 500
_AUDIT = sys.audit


class ReportPlugin:
    """Per-test outcome as junit XML would count it: setup failure = error, call failure = failed,
    skip and xfail = skipped, teardown failure after a pass = error.

    Records and integrity checks go out as audit events the monitor relays (``rlguard.record``,
    ``rlguard.check``); ``sys.audit`` is bound as a default argument here, so replacing it later
    changes nothing (and setting ``__defaults__`` raises an audit event of its own)."""

    def __init__(self):
        self.outcomes = {}

    def pytest_collection(self, session, audit=_AUDIT):
        # every plugin has configured and every sessionstart hook has run: what pytest is from now on
        audit("rlguard.check", "session", "session start", session.config.pluginmanager)

    def pytest_collectreport(self, report, audit=_AUDIT):
        if report.failed:
            message = str(report.longrepr)[-MESSAGE_CHARS:]
            audit("rlguard.record", {"kind": "collect_error", "id": report.nodeid, "message": message})

    def pytest_collection_finish(self, session, audit=_AUDIT):
        audit("rlguard.check", "full", "collection")
        for item in session.items:
            audit("rlguard.record", {"kind": "collected", "id": item.nodeid})

    def pytest_runtest_logreport(self, report, audit=_AUDIT):
        nodeid = report.nodeid
        current = self.outcomes.get(nodeid)
        if report.when == "setup":
            if report.failed:
                self.outcomes[nodeid] = "error"
            elif report.skipped:
                self.outcomes[nodeid] = "skipped"
        elif report.when == "call":
            audit("rlguard.check", "core", nodeid)
            if report.passed:
                self.outcomes[nodeid] = "passed"
            elif report.skipped:
                self.outcomes[nodeid] = "skipped"
            else:
                self.outcomes[nodeid] = "failed"
        elif report.when == "teardown":
            if report.failed and current != "failed":
                self.outcomes[nodeid] = "error"
            audit(
                "rlguard.record",
                {"kind": "test", "id": nodeid, "outcome": self.outcomes.get(nodeid, "error")},
            )

    def pytest_sessionfinish(self, session, exitstatus, audit=_AUDIT):
        audit("rlguard.check", "full", "session end")
        audit("rlguard.record", {"kind": "end", "exitstatus": int(exitstatus)})


def _launcher_codes():
    """The code objects allowed to raise ``rlguard.*`` events: this plugin's and ``main``'s."""
    methods = [v for v in vars(ReportPlugin).values() if callable(v)]
    return [f.__code__ for f in [*methods, main]]


def _in_image(name):
    """Whether the image (stdlib or site-packages) provides ``name``: found before the workspace
    is on sys.path, and not a built-in (which no file can shadow)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin not in ("built-in", "frozen")


def _import_framework():
    """pytest's built-in plugins and unittest, imported before the workspace can be: what the
    monitor's snapshot covers, and what a workspace ``import unittest`` finds already loaded."""
    import importlib
    import unittest  # noqa: F401

    import _pytest.config
    import pytest  # noqa: F401

    for name in _pytest.config.default_plugins:
        try:
            importlib.import_module(f"_pytest.{name}")
        except ImportError:
            pass
    for name in ("_pytest.runner", "_pytest.reports", "_pytest.main", "_pytest.python", "_pytest.outcomes"):
        importlib.import_module(name)


def main(config_path, audit=_AUDIT):
    with open(config_path) as fh:
        config = json.load(fh)
    os.set_inheritable(REPORT_FD, False)
    os.set_inheritable(LIFELINE_FD, False)
    import grading_monitor

    grading_monitor.install(
        REPORT_FD,
        config["workspace"],
        config["protected"],
        config["grader_dir"],
        _launcher_codes(),
        watch=config.get("monitor", True),
    )
    audit("rlguard.record", {"kind": "start", "pid": os.getpid()})
    from importlib.metadata import entry_points

    image_plugins = sorted({ep.module for ep in entry_points(group="pytest11")})
    shadowing = [name for name in config["added_modules"] if _in_image(name)]
    if shadowing:
        audit("rlguard.record", {"kind": "shadow", "modules": shadowing})
        audit("rlguard.record", {"kind": "exit", "rc": 4})
        os._exit(4)
    _import_framework()
    audit("rlguard.check", "snapshot", "start-up")
    workspace = config["workspace"]
    paths = [workspace, *(os.path.join(workspace, rel) for rel in config["pythonpath"])]
    sys.path[:0] = paths
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    os.chdir(workspace)
    import pytest

    args = ["-p", "no:cacheprovider", "--rootdir", workspace]
    for module in image_plugins:
        args += ["-p", module]
    rc = int(pytest.main([*args, *config["args"]], plugins=[ReportPlugin()]))
    sys.stdout.flush()
    sys.stderr.flush()
    audit("rlguard.check", "end", "after the session")
    audit("rlguard.record", {"kind": "exit", "rc": rc})
    os._exit(rc)


if __name__ == "__main__":
    main(sys.argv[1])
