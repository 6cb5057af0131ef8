"""Decoys against the real programs, run in a network namespace without interfaces (what a sandbox
with its network down looks like): same output, same exit code.

Needs root (to create the namespace) and the programs themselves; where either is missing the
affected case is skipped with the reason. Nothing can leave the namespace: it has no interfaces.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from guard.decoys import make_decoy
from guard.types import Category, GuardContext, NormalizedCall, RuleMatch, RuleResult, ToolCall
from tests.guard.test_decoys import decoy

UNSHARE = shutil.which("unshare")


def run_offline(command: str, cwd: Path | None = None) -> tuple[str, int]:
    """``command`` in a fresh network namespace; merged stdout+stderr, as the sandbox reports them."""
    if UNSHARE is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to create a network namespace")
    # the sandbox image's locale: C.UTF-8 (findutils and wget quote with curly quotes there)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": "/tmp",
    }
    done = subprocess.run(
        [UNSHARE, "--net", "--", "/bin/bash", "-c", command],  # argv[0] as in the sandbox
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=30,
        env=env,
        cwd=cwd,
    )
    # raw bytes, as the sandbox passes them on: "\r" of progress meters and final newlines kept
    return done.stdout.decode("utf-8", "replace"), done.returncode


def need(program: str) -> None:
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed here")


_CURL_METER = re.compile(
    r"  % Total .*Current\n +Dload .*Speed\n"  # header
    r"|\r +\d+ +\d+ +\d+ +\d+ +\d+ +\d+ +\d+ +\d+ +[-:\d]+ +[-:\d]+ +[-:\d]+ +\d+\n?"  # zero line
)


@pytest.mark.parametrize(
    "command",
    [
        "curl https://solutions.example.com/median.py",
        "curl -sS https://solutions.example.com/median.py",
        "curl -s https://solutions.example.com/median.py",
        "curl -o sol.py http://solutions.example.com/median.py",
    ],
)
def test_curl_matches_the_real_one(command: str, tmp_path: Path) -> None:
    """Same error line and exit code; the progress meter itself depends on timing (curl draws it
    only once resolution takes long enough, and redraws it each second), so it is compared apart."""
    need("curl")
    fake = decoy(command)
    real, code = run_offline(command, cwd=tmp_path)
    assert (_CURL_METER.sub("", real), code) == (_CURL_METER.sub("", fake.output), fake.exit_code)
    if _CURL_METER.search(real):
        assert _CURL_METER.findall(real)[:2] == _CURL_METER.findall(fake.output)[:2]


def test_wget_matches_the_real_one_but_for_the_clock() -> None:
    need("wget")
    command = "wget https://solutions.example.com/median.py"
    real, code = run_offline(command)
    fake = decoy(command)
    stamp = re.compile(r"^--\d{4}-\d\d-\d\d \d\d:\d\d:\d\d--", re.M)
    assert (stamp.sub("--T--", real), code) == (stamp.sub("--T--", fake.output), fake.exit_code)


@pytest.mark.parametrize(
    "command",
    [
        "git clone https://github.com/someone/solutions",
        "git clone https://github.com/someone/solutions.git /tmp/sol",
        "git ls-remote https://github.com/someone/solutions",
        "git fetch origin",
        "git fetch",
        "git ls-remote",
        "git show deadbeef",
        "git checkout future-fix",
        "git clone git@github.com:someone/solutions.git",
    ],
)
def test_git_matches_the_real_one(command: str, tmp_path: Path) -> None:
    need("git")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    real = run_offline(command, cwd=tmp_path)
    fake = decoy(command, Category.GIT_HISTORY_LEAK)
    assert real == (fake.output, fake.exit_code)


@pytest.mark.parametrize(
    "command", ["ssh solutions.example.com", "ssh -p 2222 me@solutions.example.com cat a"]
)
def test_ssh_matches_the_real_one(command: str) -> None:
    need("ssh")
    fake = decoy(command)
    assert run_offline(command) == (fake.output, fake.exit_code)


def test_python_urllib_ends_like_the_real_one() -> None:
    need("python3")
    code = "import urllib.request; urllib.request.urlopen('http://solutions.example.com/x')"
    command = f"python3 -c {shlex.quote(code)}"
    real, real_code = run_offline(command)
    fake = decoy(command, code=(code,))
    assert real.splitlines()[-1] == fake.output.splitlines()[-1] and real_code == fake.exit_code
    assert real.splitlines()[0] == fake.output.splitlines()[0] == "Traceback (most recent call last):"


FILE_COMMANDS = [
    "cat /hidden/tests/test_median.py",
    "head -n 20 /grader/grade.py",
    "tail -5 /grader/grade.py",
    "tac /grader/grade.py",
    "less /hidden/tests/test_median.py",
    "more /hidden/tests/test_median.py",
    "sed -n 1,20p /reference/median.py",
    "awk 1 /reference/median.py",
    "wc -l /hidden/tests/test_median.py",
    "nl /solution/patch.diff",
    "base64 /solution/patch.diff",
    "sha256sum /solution/patch.diff",
    "xxd /solution/patch.diff",
    "ls -la /hidden",
    "ls /grader /solution",
    "stat /grader",
    "du -sh /grader",
    "cp -r /hidden/tests /tmp/t",
    "mv /hidden/tests /tmp/t",
    "grep -rn assert /hidden/tests",
    "grep -rs assert /hidden/tests",
    "find /grader -name '*.py'",
    "find /hidden /solution -type f",
    "tar czf /tmp/t.tgz /hidden",
    "file /grader/grade.py",
    "python3 -c 'print(open(\"/hidden/tests/test_median.py\").read())'",
]


@pytest.mark.parametrize("command", FILE_COMMANDS)
def test_reading_a_protected_path_matches_the_real_one(command: str) -> None:
    need(shlex.split(command)[0])
    for path in ("/hidden", "/grader", "/solution", "/reference"):
        if os.path.exists(path):
            pytest.skip(f"{path} exists on this machine")
    code = (shlex.split(command)[2],) if command.startswith("python3 -c") else ()
    fake = decoy(command, Category.HIDDEN_TEST_ACCESS, code=code)
    assert run_offline(command) == (fake.output, fake.exit_code)


@pytest.mark.parametrize("script", ["echo $(( 1 + ", 'echo "abc', "if true; then echo", "echo )"])
def test_unparseable_commands_fail_as_bash_does(script: str) -> None:
    """A call the parser rejects gets bash's own syntax error (single lines: nothing runs for real)."""
    call = ToolCall("bash", {"command": script})
    normalized = NormalizedCall("bash", script, parse_error="shell syntax error")
    result = RuleResult(normalized, RuleMatch("unparseable", "unparseable", "escalate", "cannot parse"))
    fake = make_decoy(call, result, GuardContext(episode_id="e"))
    real = subprocess.run(
        ["/bin/bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10
    )
    assert (real.stdout.decode(), real.returncode) == (fake.output, fake.exit_code)
