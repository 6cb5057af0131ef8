"""Small pieces without a server: admin token bootstrap, tool schemas, JSON logs, body limit config."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys

import pytest

from contract.tools import ARGUMENT_MODELS, openai_tools
from gateway.core.auth import ensure_admin_token, hash_token, new_token
from gateway.core.logs import JsonFormatter
from rlguard.cli.audit import parse_since
from rlguard.errors import RlguardError
from rlguard.settings import Settings
from store.migrate import head_revision


def test_admin_token_generated_once_with_mode_0600_and_printed_once(tmp_path, capsys) -> None:
    settings = Settings(state_dir=tmp_path, admin_token=None)
    first = ensure_admin_token(settings)
    printed = capsys.readouterr().err
    assert first in printed
    path = tmp_path / "admin_token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_admin_token(settings) == first
    assert capsys.readouterr().err == ""  # later starts print nothing
    assert ensure_admin_token(Settings(state_dir=tmp_path, admin_token="from-settings")) == "from-settings"


def test_agent_tokens_are_256_bit_and_hashed() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100 and all(len(t) == 43 for t in tokens)
    token = tokens.pop()
    assert len(hash_token(token)) == 64 and token not in hash_token(token)


def test_tool_schemas_are_plain_openai_functions() -> None:
    tools = openai_tools()
    assert {t["function"]["name"] for t in tools} == set(ARGUMENT_MODELS)
    for tool in tools:
        parameters = tool["function"]["parameters"]
        assert tool["type"] == "function" and parameters["type"] == "object"
        assert parameters["additionalProperties"] is False
        assert "title" not in parameters and all("title" not in p for p in parameters["properties"].values())
        assert "anyOf" not in json.dumps(parameters)  # optional arguments are plain types


def test_json_logs_carry_episode_ids() -> None:
    record = logging.LogRecord("gateway", logging.INFO, __file__, 1, "tool call", (), None)
    record.episode_id = "abc123"
    record.total_ms = 1.5
    entry = json.loads(JsonFormatter().format(record))
    assert entry["msg"] == "tool call" and entry["episode_id"] == "abc123" and entry["total_ms"] == 1.5
    assert entry["level"] == "info" and entry["ts"].endswith("+00:00")


def test_db_upgrade_command_creates_the_schema(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {**os.environ, "RLGUARD_DATABASE_URL": url}
    out = subprocess.run(
        [sys.executable, "-m", "rlguard", "db", "upgrade"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"revision {head_revision()}" in out.stdout


def test_audit_since_must_be_iso_8601() -> None:
    with pytest.raises(RlguardError, match="ISO 8601"):
        parse_since("yesterday")
    assert parse_since("2026-01-31T12:00").tzinfo is not None


def test_serve_without_an_engine_fails_with_one_line(tmp_path) -> None:
    env = {
        **os.environ,
        "RLGUARD_DOCKER_HOST": f"unix://{tmp_path / 'no-engine.sock'}",
        "RLGUARD_STATE_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "-m", "rlguard", "serve", "--port", "0"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert (
        result.stderr.startswith("error: no Docker engine answers at unix://")
        and "Traceback" not in result.stderr
    )
