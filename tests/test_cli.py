"""The command line answers as an installed program would.

Every command tried with bad input prints one line (``error: ...``) on stderr and exits with a
non-zero status; every option has help; servers bind first, print their URL once they answer, and
end on Ctrl-C with one line and status 130; suites are found by name once registered.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import typer.main
from typer.testing import CliRunner

from rlguard import __version__
from rlguard.cli import app
from rlguard.settings import Settings, get_settings
from store.migrate import upgrade
from tasks.spec import BUILTIN_SUITES_DIR
from tasks.suite_index import SuiteIndex

RLGUARD = [sys.executable, "-m", "rlguard"]


def test_version_prints_installed_version() -> None:
    out = subprocess.run([*RLGUARD, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"rlguard {__version__}"


def test_settings_read_prefixed_and_nested_environment(monkeypatch) -> None:
    monkeypatch.setenv("RLGUARD_DATABASE_URL", "sqlite:////tmp/x.db")
    monkeypatch.setenv("RLGUARD_SANDBOX__LIMITS__PIDS", "77")
    settings = Settings()
    assert settings.resolved_database_url == "sqlite:////tmp/x.db"
    assert settings.sandbox.limits.pids == 77


def _commands(command, path: tuple[str, ...] = ("rlguard",)) -> Iterator[tuple[str, object]]:
    yield " ".join(path), command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_every_command_and_option_has_help_written_for_the_terminal() -> None:
    root = typer.main.get_command(app)
    missing, backticks, cut = [], [], []
    for path, command in _commands(root):
        texts = [command.help or ""]
        if not (command.help or "").strip():
            missing.append(path)
        for param in command.params:
            if not (getattr(param, "help", None) or "").strip():
                missing.append(f"{path} {param.name}")
            texts.append(getattr(param, "help", None) or "")
        backticks += [path for text in texts if "``" in text]
        if path != "rlguard" and command.get_short_help_str(67).endswith("..."):  # as a command list shows it
            cut.append(path)
    assert missing == [] and backticks == [] and cut == []


def test_every_option_names_its_value_not_its_type() -> None:
    result = CliRunner().invoke(app, ["rollout", "run", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert "--suite SUITE" in result.stdout and "--policy-url URL" in result.stdout
    assert "--scripted PATH" in result.stdout and "list[str]" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh state directory for the process-wide settings (read again for each test)."""
    state_dir = tmp_path / "state"
    monkeypatch.setenv("RLGUARD_STATE_DIR", str(state_dir))
    monkeypatch.delenv("RLGUARD_DATABASE_URL", raising=False)
    monkeypatch.delenv("RLGUARD_GATEWAY_URL", raising=False)
    get_settings.cache_clear()
    yield state_dir
    get_settings.cache_clear()


def one_error_line(args: list[str], env: dict[str, str] | None = None) -> str:
    """Run ``rlguard ARGS`` in this process; assert it failed with one line on stderr; the line."""
    get_settings.cache_clear()
    result = CliRunner().invoke(app, args, env=env)
    get_settings.cache_clear()
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (args, result.exit_code, result.output, result.exception)
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.stderr)
    return lines[0]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SCRIPT = str(Path(__file__).resolve().parent.parent / "rollout" / "scripts" / "builtin.yaml")


def test_usage_mistakes_are_one_line(state: Path) -> None:
    cases = {
        ("rollout", "run", "--tasks", "builtin"): "No such option: --tasks",
        ("export",): "Missing option '--out'",
        ("grade", "--task", "x"): "Missing option '--suite'",
        ("audit", "--limit", "0"): "--limit",
        ("rollout", "run", "--scripted", "/no/such/script.yaml"): "does not exist",
        ("nosuch",): "No such command",
    }
    for args, fragment in cases.items():
        line = one_error_line(list(args))
        assert fragment in line and "--help" in line, line


def test_bad_database_urls_are_one_line_and_create_nothing(state: Path, tmp_path: Path) -> None:
    mistyped = tmp_path / "no-such-dir" / "rlguard.db"
    unreachable = f"postgresql://rlguard:secret@127.0.0.1:{closed_port()}/rlguard"
    readers = [
        ["audit"],
        ["audit", "stats"],
        ["audit", "patches"],
        ["export", "--out", str(tmp_path / "x.jsonl")],
    ]
    for args in readers:
        assert "unsupported database 'mysql'" in one_error_line([*args, "--database-url", "mysql://x/y"])
        assert "no database at" in one_error_line([*args, "--database-url", f"sqlite:///{mistyped}"])
        line = one_error_line([*args, "--database-url", unreachable])
        assert "cannot reach the database" in line and "secret" not in line
        # the default database of a fresh state directory: nothing recorded, nothing made
        assert "nothing was recorded there" in one_error_line(args)
    assert "no directory" in one_error_line(["db", "upgrade", "--database-url", f"sqlite:///{mistyped}"])
    assert "cannot" in one_error_line(["db", "upgrade", "--database-url", unreachable])
    assert "no database at" in one_error_line(["train", "--database-url", f"sqlite:///{mistyped}"])
    assert "not a database URL" in one_error_line(["audit"], env={"RLGUARD_DATABASE_URL": "::nonsense"})
    assert not mistyped.parent.exists() and not (state / "rlguard.db").exists()


def test_a_bad_setting_is_one_line(state: Path) -> None:
    line = one_error_line(["audit"], env={"RLGUARD_GATEWAY__PORT": "many"})
    assert line.startswith("error: bad setting RLGUARD_GATEWAY__PORT")


def test_unknown_suites_and_tasks_are_one_line_naming_what_exists(state: Path, tmp_path: Path) -> None:
    patch = tmp_path / "fix.patch"
    patch.write_text("")
    for args in (
        ["tasks", "list", "nosuch"],
        ["tasks", "check", "nosuch"],
        ["tasks", "build-env", "nosuch"],
        ["grade", "--suite", "nosuch", "--task", "lru-cache", "--patch", str(patch)],
        ["mcp", "serve", "--suite", "nosuch", "--task", "lru-cache"],
        ["rollout", "run", "--suite", "nosuch", "--scripted", SCRIPT],
        ["loop", "--suite", "nosuch"],
        ["serve", "--port", "0", "--suite", "nosuch"],
        ["bench", "grading", "--suite", "nosuch"],
    ):
        assert "no suite 'nosuch': not a known suite name (builtin)" in one_error_line(args), args
    for args in (
        ["tasks", "check", "builtin", "--task", "nosuch"],
        ["grade", "--suite", "builtin", "--task", "nosuch", "--patch", str(patch)],
        ["mcp", "serve", "--task", "nosuch"],
        ["rollout", "run", "--task", "nosuch", "--scripted", SCRIPT],
        ["loop", "--task", "nosuch"],
    ):
        line = one_error_line(args)
        assert "no task 'nosuch'" in line and "lru-cache" in line, args
    assert "no buildable suite" in one_error_line(["tasks", "build", "nosuch"])


def test_missing_files_and_bad_values_are_one_line(state: Path, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    cases = {
        ("grade", "--suite", "builtin", "--task", "lru-cache", "--patch", missing): "cannot read",
        ("grade", "--suite", "builtin", "--task", "lru-cache", "--workspace", missing): "not a directory",
        ("grade", "--suite", "builtin", "--task", "lru-cache"): "exactly one of --workspace",
        ("guard", "eval", missing): "no such corpus file",
        ("guard", "check", "--args", "{}", "--task-file", missing): "cannot read task file",
        ("guard", "check", "--args", "not json"): "--args is not JSON",
        ("guard", "check", "--args", "{}", "--tool", "rm"): "--tool must be one of",
        (
            "tasks",
            "import",
            "swebench",
            missing,
            "--repos",
            missing,
            "--out",
            str(tmp_path / "s"),
        ): "no such rows",
        ("plot", missing): "no metrics.jsonl",
        ("sandbox", "exec", "--workspace", missing, "--", "true"): "is not a directory",
        ("sandbox", "exec", "--memory", "lots", "--", "true"): "bad sandbox limits",
        ("bench", "guard", "--corpus", missing): missing,
        ("export", "--out", f"{missing}/x.jsonl"): "no directory",
        ("export", "--out", "x.parquet", "--format", "xml"): "--format must be one of",
        ("audit", "--since", "yesterday"): "ISO 8601",
        ("episodes", "list", "--since", "yesterday"): "ISO 8601",
        ("episodes", "list", "--database-url", f"sqlite:///{missing}/x.db"): "no database at",
        ("episodes", "show", "nope", "--database-url", f"sqlite:///{missing}/x.db"): "no database at",
        ("bench", "decoy", "--regimes", "sometimes"): "sometimes",
        ("train", "--algo", "nope"): "bad value for --algo: unknown algorithm 'nope'; known: grpo, opd, ppo",
        ("train", "--algo", "opd"): "needs at least one --teacher",
        ("train", "--intercept-penalty", "-0.5"): "--intercept-penalty",
        ("loop", "--intercept-penalty", "-1"): "--intercept-penalty",
        ("loop", "--schedule", "sometimes"): "--schedule must be sync or async",
        ("mcp", "serve", "--task", "lru-cache", "--transport", "pigeon"): "--transport must be one of",
        ("mcp", "serve", "--task", "builtin/lru-cache"): "give the task id alone",
        ("policy", "serve", "--model", missing, "--port", "0"): "not a model directory",
        ("rollout", "run"): "give a policy",
    }
    for args, fragment in cases.items():
        assert fragment in one_error_line(list(args)), args
    database = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(database)
    assert "not a model directory" in one_error_line(
        ["train", "--model", missing, "--database-url", database]
    )


def test_no_docker_engine_is_one_line_wherever_one_is_needed(state: Path, tmp_path: Path) -> None:
    env = {"RLGUARD_DOCKER_HOST": f"unix://{tmp_path / 'no-engine.sock'}"}
    for args in (
        ["demo"],
        ["serve", "--port", "0"],
        ["mcp", "serve", "--task", "lru-cache"],
        ["grade", "--suite", "builtin", "--task", "lru-cache", "--workspace", str(tmp_path)],
        ["tasks", "check", "builtin", "--task", "lru-cache"],
        ["tasks", "build", "realworld"],
        ["tasks", "build-env", "builtin"],
        ["sandbox", "exec", "--", "true"],
        ["sandbox", "gc"],
        ["sandbox", "image", "ensure"],
        ["sandbox", "image", "build"],
        ["bench", "sandbox"],
    ):
        assert "no Docker engine answers at unix://" in one_error_line(args, env=env), args


def test_rollout_run_fails_when_no_gateway_answers(state: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    args = ["rollout", "run", "--scripted", SCRIPT, "--gateway-url", url]
    line = one_error_line(args, env={"RLGUARD_ADMIN_TOKEN": "t"})
    assert line == f"error: no gateway answers at {url} (ConnectError); start one: rlguard serve"
    assert "no admin token" in one_error_line(args)


def small_suite(parent: Path, name: str) -> Path:
    directory = parent / name
    shutil.copytree(BUILTIN_SUITES_DIR / "builtin" / "roman-numerals", directory / "roman-numerals")
    return directory


def test_a_registered_suite_is_found_by_name_everywhere(state: Path, tmp_path: Path) -> None:
    SuiteIndex(state).register(small_suite(tmp_path / "anywhere", "mine"))
    get_settings.cache_clear()
    listed = CliRunner().invoke(app, ["tasks", "list", "mine", "--json"])
    assert listed.exit_code == 0, listed.output
    assert '"id": "mine/roman-numerals"' in listed.stdout
    everything = CliRunner().invoke(app, ["tasks", "list", "--json"])
    assert '"mine/roman-numerals"' in everything.stdout and '"builtin/lru-cache"' in everything.stdout
    # the name reaches the other commands too: they fail later, on the task, not on the suite
    for args in (
        ["grade", "--suite", "mine", "--task", "nosuch", "--workspace", str(tmp_path)],
        ["mcp", "serve", "--suite", "mine", "--task", "nosuch"],
        ["rollout", "run", "--suite", "mine", "--task", "nosuch", "--scripted", SCRIPT],
        ["loop", "--suite", "mine", "--task", "nosuch"],
    ):
        assert "no task 'nosuch' in mine; known: roman-numerals" in one_error_line(args), args


def _hold_port() -> socket.socket:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder


@pytest.mark.parametrize(
    "args",
    [["serve"], ["policy", "serve"], ["mcp", "serve", "--task", "lru-cache", "--transport", "http"]],
    ids=["gateway", "policy", "mcp"],
)
def test_a_port_in_use_is_one_line_before_anything_starts(args: list[str], tmp_path: Path) -> None:
    with _hold_port() as holder:
        port = holder.getsockname()[1]
        env = {**os.environ, "RLGUARD_STATE_DIR": str(tmp_path)}
        done = subprocess.run([*RLGUARD, *args, "--port", str(port)], env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
    what = {"serve": "gateway", "policy": "policy server", "mcp": "MCP server"}[args[0]]
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"error: the {what} cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
    assert not (tmp_path / "rlguard.db").exists()  # nothing started


def _start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """A real ``rlguard`` server; the URL it prints once it answers."""
    proc = subprocess.Popen(
        [*RLGUARD, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if " at http" not in line:
        proc.kill()
        raise AssertionError(f"no URL line: {line!r} {proc.communicate()[1][-2000:]}")
    return proc, line.split(" at ", 1)[1].split()[0]


def _interrupt(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.docker
def test_serve_prints_its_url_serves_registered_suites_and_ends_on_ctrl_c(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    SuiteIndex(state_dir).register(small_suite(tmp_path, "mine"))
    env = {**os.environ, "RLGUARD_STATE_DIR": str(state_dir), "RLGUARD_INSTANCE": f"test-cli-{os.getpid()}"}
    proc, url = _start(["serve", "--port", "0"], env)
    try:
        token = (state_dir / "admin_token").read_text().strip()
        tasks = httpx.get(f"{url}/v1/tasks", headers={"Authorization": f"Bearer {token}"}, timeout=60).json()
        served = {task["id"] for task in tasks}
        assert "mine/roman-numerals" in served and "builtin/lru-cache" in served
        rollout = [
            *RLGUARD,
            "rollout",
            "run",
            "--gateway-url",
            url,
            "--task",
            "roman-numerals",
            "--model",
            "tiny",
        ]

        def rollout_run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*rollout, *args], env=env, capture_output=True, text=True, timeout=600)

        down = rollout_run("--policy-url", f"http://127.0.0.1:{closed_port()}/v1")
        assert down.returncode == 2 and down.stderr.strip().splitlines()[-1].startswith(
            "error: no policy server answers at http://127.0.0.1:"
        )
        # a policy URL that answers, but not as a policy: every episode fails, and so does the run
        failed = rollout_run("--policy-url", f"{url}/v1", "--json")
        assert failed.returncode == 2, failed.stderr
        assert failed.stderr.strip().splitlines()[-1].startswith("error: every episode failed (1)")
    finally:
        code, err = _interrupt(proc)
    assert code == 130 and err.strip().splitlines()[-1] == "error: interrupted"  # (after the token note)


@pytest.mark.docker
def test_serve_with_suite_serves_only_that_suite(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    SuiteIndex(state_dir).register(small_suite(tmp_path, "mine"))
    env = {**os.environ, "RLGUARD_STATE_DIR": str(state_dir), "RLGUARD_INSTANCE": f"test-cli-s-{os.getpid()}"}
    proc, url = _start(["serve", "--port", "0", "--suite", "mine"], env)
    try:
        token = (state_dir / "admin_token").read_text().strip()
        tasks = httpx.get(f"{url}/v1/tasks", headers={"Authorization": f"Bearer {token}"}, timeout=60).json()
        assert [task["id"] for task in tasks] == ["mine/roman-numerals"]
        missing = subprocess.run(
            [*RLGUARD, "rollout", "run", "--gateway-url", url, "--scripted", SCRIPT, "--task", "lru-cache"],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert missing.returncode == 2
        assert missing.stderr.strip().splitlines() == [
            f"error: the gateway at {url} does not serve builtin/lru-cache; "
            "start it with: rlguard serve --suite SUITE"
        ]
    finally:
        code, _ = _interrupt(proc)
    assert code == 130
