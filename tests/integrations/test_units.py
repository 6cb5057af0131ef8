"""The adapters' small pure parts: answer text, task names, the command an Inspect exec sends."""

from __future__ import annotations

import subprocess

import pytest

from rlguard.errors import RlguardError
from rlguard.integrations.episode import render_answer, task_ref
from rlguard.integrations.inspect_sandbox import _script, _with_input


def test_answer_text_adds_truncation_then_exit_code() -> None:
    assert render_answer("ok\n", 0, False) == "ok\n"
    assert render_answer("boom", 2, False) == "boom\n[exit code: 2]"
    assert render_answer("a…", 0, True) == "a…\n[output truncated]"
    assert render_answer("a…", 1, True) == "a…\n[output truncated]\n[exit code: 1]"


def test_task_ref_names_suites_and_refuses_a_suite_in_the_task(tmp_path) -> None:
    assert task_ref("builtin", "matrix-transpose") == "builtin/matrix-transpose"
    (tmp_path / "mysuite").mkdir()
    assert task_ref(str(tmp_path / "mysuite"), "t1") == "mysuite/t1"
    with pytest.raises(RlguardError, match="give the task id alone"):
        task_ref("builtin", "builtin/matrix-transpose")


def test_shell_wrappers_are_unwrapped_other_commands_quoted() -> None:
    assert _script(["bash", "--login", "-c", "ls -la | wc -l"]) == "ls -la | wc -l"
    assert _script(["sh", "-c", "echo hi"]) == "echo hi"
    assert _script(["python3", "-c", "print('a b')"]) == "python3 -c 'print('\"'\"'a b'\"'\"')'"
    assert (
        _script(["bash", "--rcfile", "x", "-c", "ls"]) == "bash --rcfile x -c ls"
    )  # unknown flag: kept whole
    with pytest.raises(ValueError):
        _script([])


@pytest.mark.parametrize(
    "data", ["line one\nline two\n", "no final newline", "RLGUARD_STDIN_x\n'quotes' $HOME"]
)
def test_input_reaches_the_command_as_stdin(data: str) -> None:
    script = _with_input("cat", data)
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert out == (data if data.endswith("\n") else data + "\n")
