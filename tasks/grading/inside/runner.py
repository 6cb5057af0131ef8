"""The TRUSTED grading process, copied into a fresh grading sandbox as ``/tmp/grader/runner.py``.

Started by the host as ``python3 -I -S -B /tmp/grader/runner.py /tmp/grader/config.json`` (no
``PYTHON*`` variables, no site hooks or ``.pth`` files, no script directory or cwd on
``sys.path``, no bytecode writes). Workspace code NEVER runs in this process:

1. it makes itself non-dumpable first, so processes of the same uid (the workspace worker) can
   neither ptrace it nor open its ``/proc/<pid>/mem``, ``fd`` or ``environ``;
2. it reads its one-shot config (nonce, tests, paths) and deletes it;
3. it runs pytest in-process over the pristine hidden tests with the grader's own ini and rootdir,
   ``--noconftest``, no cache, no plugin autoload; ``/workspace`` is never on ``sys.path``.
   Workspace modules are served by ``grading_import_hook`` as proxies (``grading_proxies``) to an
   untrusted worker process (``grading_remote`` talks to it), and only once every hidden test
   module has been collected; the hidden test files are emptied before the worker can start, so it
   cannot read expected values (they stay as empty files: pytest re-checks the path of a test
   package's ``__init__.py`` at setup);
4. it prints one ``RLGUARD-GRADE <nonce> {json}`` line per test and, after killing the worker's
   process group, a final summary line, on its own stdout, which no other process can reach.

The host (``tasks.grading.isolated``) accepts only lines with the nonce. Runs inside the sandbox image:
standard library + pytest only (pytest >= 7).

With ``"collect_only": true`` in its config the same code counts the tests instead (``pytest
--collect-only``, one ``collected`` line per node id, no worker ever started): the host runs it over
the pristine task when the suite is loaded, so the tests it demands are counted by pytest itself.
"""

import ctypes
import json
import os
import random
import site
import sys
import tempfile
import time

PR_SET_DUMPABLE = 4
RESULT_PREFIX = "RLGUARD-GRADE"
MESSAGE_CHARS = 300
PYTEST_TAIL_BYTES = 1500
WORKER_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
}


def make_non_dumpable() -> None:
    """PR_SET_DUMPABLE=0: /proc/<pid>/{mem,fd,environ} and ptrace become root-only for this process."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def root_owned(path: str) -> bool:
    """True when ``path`` and every directory above it are root's and writable by root only.

    Modules pytest imports lazily while tests run must come from where the worker (same uid as
    this process, no capabilities) cannot put files: not /tmp/grader, not /workspace, not /tmp.
    """
    path = os.path.realpath(path)
    while True:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_uid != 0 or st.st_mode & 0o022:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


class Emitter:
    """Nonce-tagged result lines on a private copy of the original stdout."""

    def __init__(self, nonce: str) -> None:
        self._prefix = f"\n{RESULT_PREFIX} {nonce} "
        self._fd = os.dup(1)

    def emit(self, record: dict) -> None:
        line = (self._prefix + json.dumps(record, separators=(",", ":")) + "\n").encode()
        while line:
            line = line[os.write(self._fd, line) :]


class ResultPlugin:
    """Turns pytest's reports into one outcome per test and releases workspace code after collection."""

    def __init__(self, emitter: Emitter, client, tests_dir: str) -> None:
        self._emitter = emitter
        self._client = client
        self._tests_dir = tests_dir
        self._phases: dict = {}
        self.collected: list = []
        self.collect_errors: list = []

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.collect_errors.append([report.nodeid, str(report.longrepr)[-MESSAGE_CHARS:]])

    def pytest_collection_finish(self, session) -> None:
        self.collected = [item.nodeid for item in session.items]
        for nodeid in self.collected:  # the host maps these onto the ids it counted at load time
            self._emitter.emit({"kind": "collected", "id": nodeid})
        if self._client is None:  # counting only
            return
        # Every hidden test module is imported: their sources go before any workspace code can run,
        # and so does every import location the worker's uid could write a module into.
        empty_tree(self._tests_dir)
        sys.path[:] = [entry for entry in sys.path if root_owned(entry)]
        sys.path_importer_cache.clear()
        self._client.allowed = True
        resolve_module_level_names(session.items, self._tests_dir)

    def pytest_runtest_logreport(self, report) -> None:
        message = "" if report.passed else str(report.longrepr)[-MESSAGE_CHARS:]
        self._phases.setdefault(report.nodeid, {})[report.when] = (report.outcome, message)

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        phases = self._phases.pop(nodeid, {})
        setup, call, teardown = (phases.get(when, (None, "")) for when in ("setup", "call", "teardown"))
        if setup[0] == "failed" or teardown[0] == "failed":
            outcome, message = "error", setup[1] or teardown[1]
        elif setup[0] == "skipped" or call[0] == "skipped":
            outcome, message = "skipped", setup[1] or call[1]
        elif (setup[0], call[0], teardown[0]) == ("passed", "passed", "passed"):
            outcome, message = "passed", ""
        else:
            outcome, message = "failed", call[1]
        self._emitter.emit({"kind": "test", "id": nodeid, "outcome": outcome, "message": message})


def resolve_module_level_names(items, tests_dir: str) -> None:
    """Lazy references bound at collection (module globals, parametrize values) become what they name.

    Only exception classes and immutable values are swapped in (``grading_proxies.resolve_lazy``):
    ``pytest.raises(InvalidVersion)`` needs a class, not a reference.
    """
    import grading_proxies

    prefix = os.path.join(os.path.realpath(tests_dir), "")
    for module in list(sys.modules.values()):
        if not os.path.realpath(str(getattr(module, "__file__", None) or "")).startswith(prefix):
            continue
        namespace = vars(module)
        for name, value in list(namespace.items()):
            if isinstance(value, grading_proxies.Remote):
                namespace[name] = grading_proxies.resolve_lazy(value)
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", None)
        if isinstance(params, dict):
            for name, value in list(params.items()):
                params[name] = grading_proxies.resolve_lazy(value)


def empty_tree(root: str) -> None:
    """Truncate every file under ``root``: the sources are gone, the paths pytest re-checks remain."""
    for directory, _, files in os.walk(root):
        for name in files:
            try:
                os.truncate(os.path.join(directory, name), 0)
            except OSError:
                os.unlink(os.path.join(directory, name))


def serve_sources_from_memory(tests_dir: str) -> None:
    """Read every test-side file into this process and empty it on disk, then serve the sources to
    pytest's assertion rewriting and to the import system from memory.

    For suites that call workspace code while they are collected (``parametrize`` over the package's
    own data, ``skipif(pkg.FLAG)``): the worker may then start during collection without ever
    finding a test source to read."""
    import importlib.machinery
    import pathlib

    from _pytest.assertion import rewrite

    sources = {}
    for directory, _, files in os.walk(tests_dir):
        for name in files:
            path = os.path.realpath(os.path.join(directory, name))
            with open(path, "rb") as fh:
                sources[path] = fh.read()
    empty_tree(tests_dir)

    class MemoryPath(type(pathlib.Path())):
        def read_bytes(self):
            found = sources.get(os.path.realpath(self))
            return found if found is not None else super().read_bytes()

    original_rewrite = rewrite._rewrite_test
    original_get_data = importlib.machinery.SourceFileLoader.get_data

    def rewrite_from_memory(fn, config):
        return original_rewrite(MemoryPath(fn), config)

    def get_data(self, path):
        found = sources.get(os.path.realpath(path))
        return found if found is not None else original_get_data(self, path)

    rewrite._rewrite_test = rewrite_from_memory
    importlib.machinery.SourceFileLoader.get_data = get_data


def seed_worker_too(client) -> None:
    """``random.seed`` in a test seeds the workspace worker's generator as well as this one."""
    local_seed = random.seed

    def seed(a=None, version=2) -> None:
        local_seed(a, version)
        client.seed([a, version])

    random.seed = seed


def _tail(stream, size: int) -> str:
    sys.stdout.flush()
    end = stream.seek(0, os.SEEK_END)
    stream.seek(max(0, end - size))
    return stream.read().decode("utf-8", "replace")


def main(config_path: str) -> int:
    make_non_dumpable()
    with open(config_path) as fh:
        config = json.load(fh)
    os.unlink(config_path)
    deadline = time.monotonic() + float(config["timeout_s"])
    emitter = Emitter(config["nonce"])
    # pytest's own report goes to an unlinked file, only its tail into the summary: the stream back
    # to the host is capped (head + tail), and result lines must not be pushed out of it.
    pytest_log = tempfile.TemporaryFile()  # noqa: SIM115 (open until the process ends)
    os.dup2(pytest_log.fileno(), 1)
    # -S left site-packages off sys.path: add the directories back, without running their .pth files.
    sys.path[:0] = [config["lib"]]
    sys.path.extend(p for p in site.getsitepackages() if os.path.isdir(p))
    for name in [n for n in os.environ if n.startswith(("PYTEST_", "PY_COLORS"))]:
        del os.environ[name]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    sys.dont_write_bytecode = True

    import grading_import_hook
    import grading_remote
    import pytest

    pytest.hookimpl(trylast=True)(ResultPlugin.pytest_collection_finish)
    if config.get("collect_only"):
        return collect_only(config, emitter, grading_import_hook, pytest, pytest_log)
    worker_argv = [
        sys.executable,
        "-B",
        "-c",
        f"import sys; sys.path.insert(0, {config['lib']!r}); import grading_worker; grading_worker.main()",
    ]
    client = grading_remote.Client(
        worker_argv,
        cwd=config["workspace"],
        env={**WORKER_ENV, "PYTHONPATH": ":".join(grading_import_hook.import_roots(config["workspace"]))},
        call_timeout_s=float(config["call_timeout_s"]),
        deadline=deadline,
    )
    served = grading_import_hook.install(
        client, config["workspace"], config["rootdir"], config.get("pristine")
    )
    seed_worker_too(client)
    if config.get("eager_workspace"):
        serve_sources_from_memory(config["rootdir"])
        client.allowed = True  # the test sources are gone from the disk: the worker may start now
    plugin = ResultPlugin(emitter, client, config["rootdir"])
    try:
        exitstatus = int(pytest.main(pytest_args(config), plugins=[plugin]))
    finally:
        client.kill()
    emitter.emit(
        {
            "kind": "summary",
            "collected": len(plugin.collected),
            "collect_errors": plugin.collect_errors[:20],
            "exitstatus": exitstatus,
            "timed_out": client.timed_out or time.monotonic() > deadline,
            "served": sorted(served)[:100],
            "sys_path": sys.path[:50],
            "worker": {**client.stats, "stderr_tail": client.stderr_tail()},
            "pytest_tail": _tail(pytest_log, PYTEST_TAIL_BYTES),
        }
    )
    return 0


def pytest_args(config: dict, *extra: str) -> list:
    return [
        "-c", config["ini"],
        "--rootdir", config["rootdir"],
        "--noconftest",
        "-p", "no:cacheprovider",
        "-p", "no:stepwise",
        "-q", "--tb=short", "--color=no",
        *extra,
        *config["tests"],
    ]  # fmt: skip


def collect_only(config: dict, emitter: Emitter, grading_import_hook, pytest, pytest_log) -> int:
    """Count the hidden tests as pytest collects them; workspace names are lazy references only."""
    served = grading_import_hook.install(None, config["workspace"], config["rootdir"])
    plugin = ResultPlugin(emitter, None, config["rootdir"])
    exitstatus = int(pytest.main(pytest_args(config, "--collect-only"), plugins=[plugin]))
    emitter.emit(
        {
            "kind": "summary",
            "collected": len(plugin.collected),
            "collect_errors": plugin.collect_errors[:20],
            "exitstatus": exitstatus,
            "served": sorted(served)[:100],
            "pytest_tail": _tail(pytest_log, PYTEST_TAIL_BYTES),
        }
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: runner.py CONFIG.json")
    sys.exit(main(sys.argv[1]))
