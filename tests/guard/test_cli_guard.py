"""``rlguard guard check`` through the real console entry point, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.openai_judge_server import keyword_policy, running_judge_server

RLGUARD = Path(sys.executable).parent / "rlguard"


def rlguard(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI with the caller's guard settings only (none inherited) and a wide console."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RLGUARD_GUARD__")}
    full_env = {**clean, "COLUMNS": "200", **(env or {})}
    return subprocess.run([str(RLGUARD), *args], capture_output=True, text=True, timeout=60, env=full_env)


def test_check_prints_verdict_and_decoy_as_json(tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("instructions: Fix median.\nprotected_paths: [/workspace/answers]\n")
    command = json.dumps({"command": "cat /workspace/answers/expected.txt"})
    done = rlguard("guard", "check", "--tool", "bash", "--args", command, "--task-file", str(task))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["verdict"]["action"] == "decoy" and out["verdict"]["stage"] == "rules"
    assert out["verdict"]["category"] == "hidden_test_access"
    assert set(out["verdict"]["stage_latency_us"]) >= {"rules"}
    assert out["decoy"] == {
        "output": "cat: /workspace/answers/expected.txt: No such file or directory\n",
        "exit_code": 1,
        "truncated": False,
    }


def test_check_allows_ordinary_work() -> None:
    done = rlguard("guard", "check", "--args", json.dumps({"command": "python -m pytest -q tests"}))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["verdict"]["action"] == "allow" and out["decoy"] is None


def test_bad_json_is_one_clear_error_line() -> None:
    done = rlguard("guard", "check", "--args", '{"command": "ls')
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --args is not JSON")


def test_check_asks_the_configured_judge() -> None:
    with running_judge_server(keyword_policy({"__never__": "answer_fetch"})) as server:
        env = {"RLGUARD_GUARD__JUDGE__BASE_URL": server.base_url, "RLGUARD_GUARD__JUDGE__MAX_RETRIES": "0"}
        # an unparseable command is always escalated by stage 1
        done = rlguard("guard", "check", "--args", json.dumps({"command": "echo $(( 1 + "}), env=env)
        assert done.returncode == 0, done.stderr
        assert len(server.requests) == 1
    out = json.loads(done.stdout)
    assert out["verdict"]["stage"] == "judge" and out["verdict"]["action"] == "allow"
    assert "judge" in out["verdict"]["stage_latency_us"]
