"""Decoys never fail, whatever the call looks like: random programs, arguments, paths and categories."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from guard.decoys import make_decoy, probe_command
from guard.types import (
    Category,
    Command,
    GuardContext,
    NormalizedCall,
    RuleMatch,
    RuleResult,
    ToolAnswer,
    ToolCall,
)

PROGRAMS = st.sampled_from(
    [
        "curl",
        "wget",
        "git",
        "pip",
        "python3",
        "node",
        "nc",
        "ssh",
        "rsync",
        "cat",
        "ls",
        "grep",
        "find",
        "rg",
        "tar",
        "sed",
        "docker",
        "mount",
        "rm",
        "mv",
        "socat",
        "perl",
        "zip",
        "weird",
    ]
)
WORDS = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
ARGS = st.lists(
    st.one_of(
        WORDS,
        st.sampled_from(
            [
                "-s",
                "-sS",
                "-v",
                "--all",
                "-q",
                "/hidden/x",
                "https://h.io/a",
                "origin",
                "log",
                "clone",
                "fetch",
                "show",
                "-m",
                "pip",
                "install",
                "-c",
                "--",
                "",
            ]
        ),
    ),
    max_size=6,
)
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CATEGORIES = st.sampled_from([c.value for c in Category] + ["custom"])


@settings(max_examples=300, deadline=None)
@given(program=PROGRAMS, args=ARGS, category=CATEGORIES, path=st.one_of(st.none(), WORDS), episode=WORDS)
def test_bash_decoys_are_always_well_formed(program, args, category, path, episode) -> None:
    command = Command(program, (program, *args))
    text = " ".join([program, *args])
    normalized = NormalizedCall("bash", text, commands=(command,), code=tuple(args[:1]))
    result = RuleResult(normalized, RuleMatch("r", category, "decoy", "d", command=command, path=path))
    call = ToolCall("bash", {"command": text})
    answer = make_decoy(call, result, GuardContext(episode_id=episode))
    assert (
        isinstance(answer, ToolAnswer)
        and isinstance(answer.output, str)
        and isinstance(answer.exit_code, int)
    )
    assert answer == make_decoy(call, result, GuardContext(episode_id=episode)) or program == "wget"
    probe = probe_command(call, result)
    assert probe is None or isinstance(probe, str)


@settings(max_examples=100, deadline=None)
@given(
    tool=st.sampled_from(["read_file", "write_file", "edit_file", "list_dir", "submit", "other"]),
    arguments=st.dictionaries(
        st.sampled_from(["path", "content", "old_str", "new_str"]), st.one_of(WORDS, st.integers())
    ),
    category=CATEGORIES,
)
def test_file_tool_decoys_are_always_well_formed(tool, arguments, category) -> None:
    result = RuleResult(NormalizedCall(tool, "x"), RuleMatch("r", category, "decoy", "d"))
    answer = make_decoy(ToolCall(tool, arguments), result, GuardContext())
    assert isinstance(answer, ToolAnswer) and isinstance(answer.output, str)
