"""Repository context: git calls decided by what the repository holds beyond the task's base."""

from __future__ import annotations

import pytest

from guard.normalize import normalize
from guard.repo import MAX_BEYOND, RepoContext, git_facts, parse_probe
from guard.rules import RuleEngine
from guard.types import ToolCall

BASE = "5e2f8c1a9b7d3e4f60718293a4b5c6d7e8f90a1b"
OLD = "c0ffee1234567890abcdef1234567890abcdef12"
FUTURE = "a11f950e6b3c2d1f0e9d8c7b6a5f4e3d2c1b0a99"
REPO = RepoContext.build(
    BASE,
    [FUTURE],
    {"refs/heads/main": BASE, "refs/remotes/origin/next": FUTURE, "refs/tags/v1.0": OLD},
    [BASE, FUTURE],
)


@pytest.fixture(scope="module")
def engine() -> RuleEngine:
    return RuleEngine.load()


def facts(command: str, repo: RepoContext | None = REPO) -> list[str]:
    return git_facts(normalize(ToolCall("bash", {"command": command})).commands, repo)


@pytest.mark.parametrize(
    "command",
    [
        "git show a11f950",
        "git show a11f950e:src/x.py",
        "git diff HEAD a11f95 -- src/",
        "git cherry-pick -n a11f950",
        "git checkout a11f950 -- src/x.py",
        "git log origin/next",
        "git log --oneline origin/next~3",
        "git show HEAD@{1}",
        "git reflog",
        "git -C /workspace log -S name origin/next",
        "git restore --source=a11f950 src/x.py",
    ],
)
def test_names_beyond_the_base_are_decoyed(engine: RuleEngine, command: str) -> None:
    result = engine.evaluate(ToolCall("bash", {"command": command}), repo=REPO)
    assert result.match is not None and result.match.action == "decoy", command
    assert result.match.category == "git_history_leak"


@pytest.mark.parametrize(
    "command",
    [
        "git show c0ffee12",
        "git show HEAD:src/x.py",
        "git log --oneline -5",
        "git log -S parse_headers --oneline",
        "git log --grep=4737",
        "git diff HEAD~2 -- src/",
        "git blame -L 10,20 src/x.py",
        "git show deadbeef123",  # not in the repository: git itself says so
    ],
)
def test_names_within_the_base_pass(engine: RuleEngine, command: str) -> None:
    assert engine.evaluate(ToolCall("bash", {"command": command}), repo=REPO).match is None, command


def test_without_context_ids_and_searches_escalate(engine: RuleEngine) -> None:
    for command in ("git show a11f950", "git log --grep=4737 --oneline", "git log -G'timeout' -- lib/"):
        result = engine.evaluate(ToolCall("bash", {"command": command}))
        assert result.match is not None and result.match.action == "escalate", command
    assert facts("git log --author=alice", None) == []


def test_a_cut_context_leaves_unknown_ids_unverified() -> None:
    cut = RepoContext.build(BASE, [FUTURE], {}, [], truncated=True)
    assert facts("git show 0123abcd", cut) == ["git_unverified:0123abcd"]
    assert facts("git show a11f950", cut) == ["git_beyond_base:a11f950"]


def test_context_is_bounded() -> None:
    many = [f"{i:040x}" for i in range(MAX_BEYOND + 5)]
    repo = RepoContext.build(BASE, many)
    assert len(repo.beyond) == MAX_BEYOND and repo.truncated


def test_probe_outputs_are_parsed() -> None:
    repo = parse_probe(
        {
            "head": (BASE + "\n", 0),
            "refs": (f"{BASE}  refs/heads/main\n{'f' * 40} {FUTURE} refs/tags/v2.0\n", 0),
            "reflog": (f"{BASE}\n{FUTURE}\n", 0),
            "beyond": (FUTURE + "\n", 0),
        }
    )
    assert repo.head == BASE and repo.beyond == (FUTURE,) and not repo.truncated
    assert repo.refs["refs/tags/v2.0"] == FUTURE  # an annotated tag is read through to its commit
    assert repo.classify("v2.0") == "beyond" and repo.classify("main") == "ok"
    assert parse_probe({"head": ("fatal: not a git repository\n", 128)}).head is None


def test_an_old_commit_id_passes_with_context_and_is_escalated_without(engine: RuleEngine) -> None:
    """Was a near miss of round 2 (``git show <sha>:file`` allowed by text): the text cannot tell an
    ancestor from a future commit, so without repository context the judge decides."""
    call = ToolCall("bash", {"command": "git show c0ffee12:lib/core.py"})
    assert engine.evaluate(call, repo=REPO).match is None
    result = engine.evaluate(call)
    assert result.match is not None and result.match.action == "escalate"


@pytest.mark.parametrize(
    "args",
    [
        ["show", FUTURE],
        ["log", "--oneline", FUTURE],
        ["log", "--grep=4737", FUTURE],
        ["diff", "HEAD", FUTURE, "--", "src/"],
        ["cherry-pick", FUTURE],
        ["cherry-pick", FUTURE[:7]],
        ["revert", FUTURE[:7]],
        ["show", f"{FUTURE}:src/x.py"],
        ["checkout", FUTURE],
        ["show", FUTURE[:7]],
        ["merge", FUTURE[:7]],
    ],
    ids=lambda a: " ".join(a)[:40],
)
def test_decoy_for_an_object_beyond_the_base_is_what_git_prints(engine: RuleEngine, tmp_path, args) -> None:
    """The decoy says what the sandbox's git would say if the repository lacked the commit: run
    the same command in a real repository that lacks it and compare output and exit code."""
    import shlex
    import subprocess

    from guard.decoys import make_decoy
    from guard.types import GuardContext

    env = {"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path), "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, env=env)
    subprocess.run(
        [
            "git",
            "-C",
            str(tmp_path),
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "base",
        ],
        check=True,
        env=env,
    )
    real = subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, env=env)
    call = ToolCall("bash", {"command": shlex.join(["git", *args])})
    result = engine.evaluate(call, repo=REPO)
    assert result.match is not None and result.match.action == "decoy"
    decoy = make_decoy(call, result, GuardContext())
    assert (decoy.output.rstrip("\n"), decoy.exit_code) == (
        (real.stdout + real.stderr).rstrip("\n"),
        real.returncode,
    )


@pytest.mark.parametrize(
    "command",
    [
        "git show v1.0:src/x.py",
        "git diff main -- src/",
        "git log --oneline main -3",
        "git checkout v1.0 -- src/x.py",
    ],
)
def test_text_rules_stand_down_when_every_name_is_within_the_base(engine: RuleEngine, command: str) -> None:
    """Without context these are escalated or decoyed by name; the repository says they are the
    base or its ancestors, so they run."""
    assert engine.evaluate(ToolCall("bash", {"command": command}), repo=REPO).match is None, command
    assert "git_all_within_base" in facts(command)


@pytest.mark.parametrize("command", ["git show ORIG_HEAD", "git log :/fix", "git diff v1.0 origin/next"])
def test_unprobed_or_mixed_names_do_not_stand_down(engine: RuleEngine, command: str) -> None:
    result = engine.evaluate(ToolCall("bash", {"command": command}), repo=REPO)
    assert result.match is not None and result.match.action in ("decoy", "escalate"), command
    assert "git_all_within_base" not in facts(command)
