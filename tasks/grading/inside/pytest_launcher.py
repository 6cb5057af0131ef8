"""Runs in the grading container (``pytest`` mode): the project's pytest, the grader's report plugin first.

Started as ``python3 -I -B launcher.py config.json`` by the host with a clean environment
(``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``), so nothing from the workspace is on ``sys.path`` while this
file sets up. In order:

1. the pytest plugins the *image* installs (``pytest11`` entry points) are listed now, before the
   workspace is importable, and later loaded by name with ``-p``: the project's usual plugins run,
   a plugin the agent declared in a ``*.dist-info`` of its own never does;
2. the report file (outside /workspace) is opened, and the report plugin is handed to
   ``pytest.main(plugins=...)``, so it is registered before any conftest or test module loads;
3. a top-level module the agent added that the image also provides (a new ``hypothesis.py`` or
   ``difflib.py`` that would replace what the tests or pytest import) stops the run: the report
   names it and the host scores zero;
4. the workspace goes first on ``sys.path`` (and into ``PYTHONPATH`` for subprocesses), as with
   ``python -m pytest`` from the repository root, and pytest runs the test files.

The report has one JSON line per test (written at teardown, flushed, so a run cut short keeps what
finished), the collection errors, pytest's own exit status at session end, and the launcher's exit
record. Only the standard library and pytest are used: this file is copied into the container.
"""

import importlib.util
import json
import os
import sys
from importlib.metadata import entry_points


class ReportPlugin:
    """Per-test outcome as junit XML would count it: setup failure = error, call failure = failed,
    skip and xfail = skipped, teardown failure after a pass = error."""

    def __init__(self, stream):
        self.stream = stream
        self.outcomes = {}

    def _write(self, record):
        self.stream.write(json.dumps(record) + "\n")

    def pytest_runtest_logreport(self, report):
        nodeid = report.nodeid
        current = self.outcomes.get(nodeid)
        if report.when == "setup":
            if report.failed:
                self.outcomes[nodeid] = "error"
            elif report.skipped:
                self.outcomes[nodeid] = "skipped"
        elif report.when == "call":
            if report.passed:
                self.outcomes[nodeid] = "passed"
            elif report.skipped:
                self.outcomes[nodeid] = "skipped"
            else:
                self.outcomes[nodeid] = "failed"
        elif report.when == "teardown":
            if report.failed and current != "failed":
                self.outcomes[nodeid] = "error"
            self._write({"kind": "test", "id": nodeid, "outcome": self.outcomes.get(nodeid, "error")})

    def pytest_collectreport(self, report):
        if report.failed:
            self._write(
                {"kind": "collect_error", "id": report.nodeid, "message": str(report.longrepr)[-500:]}
            )

    def pytest_sessionfinish(self, session, exitstatus):
        self._write({"kind": "end", "exitstatus": int(exitstatus)})


def _in_image(name):
    """Whether the image (stdlib or site-packages) provides ``name``: found before the workspace
    is on sys.path, and not a built-in (which no file can shadow)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin not in ("built-in", "frozen")


def main(config_path):
    with open(config_path) as fh:
        config = json.load(fh)
    image_plugins = sorted({ep.module for ep in entry_points(group="pytest11")})
    shadowing = [name for name in config["added_modules"] if _in_image(name)]
    workspace = config["workspace"]
    paths = [workspace, *(os.path.join(workspace, rel) for rel in config["pythonpath"])]
    sys.path[:0] = paths
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    os.chdir(workspace)
    report = open(config["report"], "w", buffering=1)  # noqa: SIM115 (open for the whole run)
    if shadowing:
        report.write(json.dumps({"kind": "shadow", "modules": shadowing}) + "\n")
        report.write(json.dumps({"kind": "exit", "rc": 4}) + "\n")
        report.close()
        os._exit(4)
    plugin = ReportPlugin(report)
    import pytest

    args = ["-p", "no:cacheprovider", "--rootdir", workspace]
    for module in image_plugins:
        args += ["-p", module]
    rc = int(pytest.main([*args, *config["args"]], plugins=[plugin]))
    report.write(json.dumps({"kind": "exit", "rc": rc}) + "\n")
    report.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    main(sys.argv[1])
