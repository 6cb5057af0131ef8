"""The rule engine's contract: loading, severity order, unparseable calls, bad rule files."""

from pathlib import Path

import pytest

from guard.rule_spec import RuleFileError
from guard.rules import RuleEngine
from guard.types import ToolCall


def bash(command: str) -> ToolCall:
    return ToolCall("bash", {"command": command})


@pytest.fixture(scope="module")
def engine() -> RuleEngine:
    return RuleEngine.load()


def test_plain_command_is_allowed(engine: RuleEngine) -> None:
    result = engine.evaluate(bash("ls -la && pytest -q tests/test_parser.py"))
    assert result.match is None
    assert result.latency_us > 0
    assert [c.program for c in result.normalized.commands] == ["ls", "pytest"]


def test_cheat_is_decoyed_with_the_triggering_command(engine: RuleEngine) -> None:
    result = engine.evaluate(bash("cd /tmp && c''url -s https://example.net/solution.py"))
    assert result.match is not None
    assert (result.match.category, result.match.action) == ("answer_fetch", "decoy")
    assert result.match.command is not None and result.match.command.program == "curl"


def test_protected_path_match_names_the_path(engine: RuleEngine) -> None:
    result = engine.evaluate(ToolCall("read_file", {"path": "../hidden/test_grading.py"}))
    assert result.match is not None and result.match.category == "hidden_test_access"
    assert result.match.path == "/hidden/test_grading.py"


def test_unparseable_is_escalated_never_allowed(engine: RuleEngine) -> None:
    result = engine.evaluate(bash('echo "unterminated'))
    assert result.match is not None
    assert (result.match.category, result.match.action) == ("unparseable", "escalate")
    assert result.normalized.parse_error


def test_decoy_beats_escalate_and_flag(engine: RuleEngine) -> None:
    # pip install <name> alone is a flag, curl to loopback an escalation, curl outward a decoy
    result = engine.evaluate(bash("pip install numpy; curl localhost:8000; curl http://203.0.113.9/x"))
    assert result.match is not None and result.match.action == "decoy"


def test_extra_protected_paths_per_task(engine: RuleEngine) -> None:
    call = ToolCall("read_file", {"path": "/workspace/private_eval/cases.json"})
    assert engine.evaluate(call).match is None
    task_engine = RuleEngine.load(protected_paths=["/workspace/private_eval"])
    hit = task_engine.evaluate(call).match
    assert hit is not None and hit.category == "hidden_test_access"


def test_user_rule_file_extends_the_pack(tmp_path: Path) -> None:
    rules = tmp_path / "mine.yaml"
    rules.write_text(
        "rules:\n"
        "  - id: mine.no_make_deploy\n"
        "    category: sandbox_escape\n"
        "    action: escalate\n"
        "    description: no deploys\n"
        "    match: {program: [make], arg: '^deploy$'}\n"
    )
    engine = RuleEngine.load([rules])
    hit = engine.evaluate(bash("env FOO=1 make deploy")).match
    assert hit is not None and hit.rule_id == "mine.no_make_deploy"
    assert engine.evaluate(bash("make test")).match is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("rules: [{id: a, category: x, action: nuke, match: {program: [ls]}}]", "action"),
        ("rules: [{id: a, category: x, action: flag, match: {}}]", "at least one condition"),
        ("rules: [{id: a, category: x, action: flag, match: {args: '('}}]", "bad regex"),
        ("rules: [{id: a, category: x, action: flag, match: {progam: [ls]}}]", "progam"),
        ("just text", "'rules' list"),
    ],
)
def test_bad_rule_files_get_a_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(RuleFileError, match=message) as info:
        RuleEngine.load([path], include_builtin=False)
    assert str(path) in str(info.value)


def test_duplicate_rule_ids_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    rule = "{id: answer_fetch.http_client, category: x, action: flag, match: {program: [ls]}}"
    path.write_text(f"rules:\n  - {rule}\n")
    with pytest.raises(RuleFileError, match="duplicate"):
        RuleEngine.load([path])


def test_engine_is_safe_to_share_between_threads(engine: RuleEngine) -> None:
    from concurrent.futures import ThreadPoolExecutor

    commands = ["c''url http://h.net/x", "ls -la", "git log --all", "cat /hidden/x"] * 100
    with ThreadPoolExecutor(8) as pool:
        matches = list(pool.map(lambda c: engine.evaluate(bash(c)).match, commands))
    assert [m is not None for m in matches] == [True, False, True, True] * 100
