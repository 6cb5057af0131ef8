"""Grading logic that needs no container: counting hidden tests, archives, reading the runner's lines."""

import io
import json
import tarfile
from pathlib import Path

import pytest

from tasks.errors import TaskError
from tasks.grading.isolated import expected_test_ids, grading_workspace_tar, parse_runner_output, score
from tasks.spec import load_suite

TASK = next(task for task in load_suite("builtin") if task.task_id == "stats-median")
IDS = expected_test_ids(TASK.hidden_dir)
NONCE = "0123456789abcdef0123456789abcdef"


def runner_output(outcomes: dict[str, str], nonce: str = NONCE, **summary) -> str:
    """What the trusted runner prints: pytest noise, one tagged line per test, then the summary."""
    lines = ["test_median.py ..F"]
    for nodeid, outcome in outcomes.items():
        record = {
            "kind": "test",
            "id": nodeid,
            "outcome": outcome,
            "message": "" if outcome == "passed" else "boom",
        }
        lines.append(f"RLGUARD-GRADE {nonce} {json.dumps(record)}")
    summary = {"kind": "summary", "collected": len(outcomes), "exitstatus": 0, "timed_out": False, **summary}
    lines.append(f"RLGUARD-GRADE {nonce} {json.dumps(summary)}")
    return "\n".join(lines) + "\n"


def graded(output: str, task=TASK):
    return score(task, IDS, parse_runner_output(output, NONCE), output)


def test_expected_ids_for_builtin_task():
    assert len(IDS) == 6
    assert all(nodeid.startswith("test_median.py::test_") for nodeid in IDS)


def test_expected_ids_classes_nested_and_duplicates(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "test_a.py").write_text(
        "def test_one(): pass\ndef test_one(): pass\ndef helper(): pass\n"
        "class TestThing:\n    def test_m(self): pass\n    def other(self): pass\n"
        "class Helper:\n    def test_not_collected(self): pass\n"
    )
    (tmp_path / "sub" / "test_b.py").write_text("async def test_async(): pass\n")
    (tmp_path / "conftest_like.py").write_text("def test_ignored(): pass\n")
    assert expected_test_ids(tmp_path) == [
        "sub/test_b.py::test_async",
        "test_a.py::test_one",
        "test_a.py::TestThing::test_m",
    ]


def test_expected_ids_are_what_pytest_collects(tmp_path: Path):
    (tmp_path / "test_p.py").write_text(
        "import pytest, unittest\n"
        "@pytest.mark.parametrize('x', [1, 2])\ndef test_p(x): pass\n"
        "class Base(unittest.TestCase):\n    def test_shared(self): pass\n"
        "class ChunkedTests(Base):\n    def test_own(self): pass\n"
    )
    assert expected_test_ids(tmp_path) == [
        "test_p.py::test_p[1]",
        "test_p.py::test_p[2]",
        "test_p.py::Base::test_shared",
        "test_p.py::ChunkedTests::test_own",
        "test_p.py::ChunkedTests::test_shared",
    ]


def test_hidden_tests_that_cannot_be_graded_are_refused_with_pytests_reason(tmp_path: Path):
    hidden, workspace = tmp_path / "hidden", tmp_path / "workspace"
    hidden.mkdir()
    (workspace / "lib").mkdir(parents=True)
    (workspace / "lib" / "__init__.py").write_text("class Base: pass\nCASES = [1, 2]\n")
    (hidden / "test_sub.py").write_text(
        "import pytest, lib\n@pytest.mark.parametrize('x', list(lib.CASES))\ndef test_x(x): pass\n"
    )
    with pytest.raises(TaskError, match="not supported by isolated grading"):
        expected_test_ids(hidden, workspace)


def test_fraction_of_passed_tests():
    outcomes = dict.fromkeys(IDS, "passed")
    outcomes[IDS[0]] = "failed"
    outcomes[IDS[1]] = "error"
    result = graded(runner_output(outcomes))
    assert (result.reward, result.passed, result.failed, result.errors, result.total) == (4 / 6, 4, 1, 1, 6)
    assert result.details["reason"] == "graded"
    assert result.details["messages"] == {IDS[0]: "boom", IDS[1]: "boom"}


def test_skipped_and_missing_tests_are_not_passes():
    outcomes = dict.fromkeys(IDS[:4], "passed")
    outcomes[IDS[3]] = "skipped"
    result = graded(runner_output(outcomes))
    assert result.passed == 3 and result.failed == 3
    assert result.details["tests"][IDS[3]] == "skipped"
    assert result.details["tests"][IDS[5]] == "missing"


def test_lines_without_this_nonce_are_ignored():
    forged = runner_output(dict.fromkeys(IDS, "passed"), nonce="f" * 32)
    forged += runner_output(dict.fromkeys(IDS, "passed"), nonce="")
    forged += "".join(
        f"RLGUARD-GRADE {json.dumps({'kind': 'test', 'id': i, 'outcome': 'passed'})}\n" for i in IDS
    )
    real = runner_output(dict.fromkeys(IDS, "failed"))
    result = graded(forged + real + forged)
    assert result.reward == 0.0 and result.details["reason"] == "graded"
    assert set(result.details["tests"].values()) == {"failed"}


def test_no_summary_scores_zero_even_with_passing_lines():
    """A runner killed before its summary (e.g. by workspace code) proves nothing."""
    output = runner_output(dict.fromkeys(IDS, "passed"))
    cut = output[: output.index('"kind": "summary"')].rsplit("\n", 1)[0]
    result = graded(cut)
    assert result.reward == 0.0 and result.details["reason"] == "grader produced no result"


def test_unknown_test_zeroes_the_reward():
    outcomes = dict.fromkeys(IDS, "passed")
    outcomes["test_median.py::test_invented"] = "passed"
    result = graded(runner_output(outcomes))
    assert result.reward == 0.0 and result.details["reason"] == "inconsistent results"


def test_duplicate_and_malformed_lines_zero_the_reward():
    duplicate = runner_output(dict.fromkeys(IDS, "passed"))
    duplicate += f"RLGUARD-GRADE {NONCE} " + json.dumps({"kind": "test", "id": IDS[0], "outcome": "passed"})
    assert graded(duplicate).details["reason"] == "malformed grader result"
    for bad in ("{broken", "[1, 2]", json.dumps({"kind": "test", "id": IDS[0], "outcome": "great"})):
        output = runner_output(dict.fromkeys(IDS, "passed")) + f"RLGUARD-GRADE {NONCE} {bad}\n"
        result = graded(output)
        assert result.reward == 0.0 and result.details["reason"] == "malformed grader result", bad


def test_timeout_scores_zero():
    result = graded(runner_output(dict.fromkeys(IDS, "passed"), timed_out=True))
    assert result.reward == 0.0 and result.details["reason"] == "timeout"


def test_all_or_nothing():
    strict = TASK.model_copy(update={"grading": TASK.grading.model_copy(update={"reward": "all_or_nothing"})})
    outcomes = dict.fromkeys(IDS, "passed")
    assert graded(runner_output(outcomes), strict).reward == 1.0
    outcomes[IDS[2]] = "failed"
    assert graded(runner_output(outcomes), strict).reward == 0.0


def _tar(entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def test_grading_workspace_restores_tests_and_drops_escapes():
    fifo = tarfile.TarInfo("pipe")
    fifo.type = tarfile.FIFOTYPE
    agent = _tar(
        [
            _file("statskit/core.py", b"# agent version\n"),
            _file("tests/test_core.py", b"# emptied by the agent\n"),
            _file("tests/test_new.py", b"def test_added(): pass\n"),
            _file("../escape.py", b"x"),
            _file("/etc/evil", b"x"),
            (fifo, None),
        ]
    )
    with tarfile.open(fileobj=io.BytesIO(grading_workspace_tar(TASK, agent))) as tar:
        contents = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
        names = tar.getnames()
    assert contents["statskit/core.py"] == b"# agent version\n"
    assert contents["tests/test_core.py"] == (TASK.workspace_dir / "tests" / "test_core.py").read_bytes()
    assert "tests/test_new.py" not in contents  # the restored tests/ is exactly the pristine one
    assert not any("escape" in n or "evil" in n or n == "pipe" for n in names)


def test_grading_workspace_rejects_garbage():
    with pytest.raises(TaskError, match="not a tar archive"):
        grading_workspace_tar(TASK, b"nope")
