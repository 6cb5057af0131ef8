"""A small Inspect task with ``sandbox="rlguard"``, run end to end with Inspect's mockllm model:
the model's bash and python tool calls and a solver's read_file / write_file all go through one
gateway episode per sample; the cheating read is decoyed like a missing file, the scorer grades
the episode, and it is in the store and in ``rlguard audit``."""

from __future__ import annotations

import pytest
from inspect_ai import Task, eval
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.solver import Generate, TaskState, generate, solver, use_tools
from inspect_ai.tool import bash, python
from inspect_ai.util import sandbox

from rlguard.integrations.inspect_sandbox import RlguardSandboxConfig, rlguard_dataset, rlguard_scorer
from tests.integrations.conftest import TASK, Gateway, solution_files

pytestmark = pytest.mark.docker

FILE_CHECKS: dict[str, object] = {}


@solver
def probe_files():
    """Use the sandbox's file API directly, as Inspect's own tools and scorers do."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        box = sandbox()
        await box.write_file("notes/plan.txt", "fix transpose\n")
        FILE_CHECKS["read_back"] = await box.read_file("notes/plan.txt")
        FILE_CHECKS["binary"] = await box.read_file("notes/plan.txt", text=False)
        for path in ("no_such_file.py", "/reference/solution.py"):  # a real miss, then the decoyed cheat
            try:
                await box.read_file(path)
            except FileNotFoundError as exc:
                FILE_CHECKS[path] = type(exc).__name__
        listing = await box.exec(["ls"], cwd="notes")
        FILE_CHECKS["ls"] = (listing.success, listing.stdout)
        return state

    return solve


def _with_usage(output: ModelOutput) -> ModelOutput:
    """Usage given up front: mockllm otherwise counts tokens with tiktoken, which downloads its encoding."""
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


def _tool_call(tool: str, **arguments: str) -> ModelOutput:
    return _with_usage(ModelOutput.for_tool_call("mockllm/model", tool, arguments))


def test_inspect_task_runs_in_guarded_rlguard_sandboxes(
    gateway: Gateway, policy_version: str, tmp_path
) -> None:
    writes = [f"cat > {p} <<'PYEOF'\n{c}PYEOF" for p, c in solution_files().items()]
    outputs = [
        _tool_call("bash", command="cat /reference/solution.py"),  # the cheat
        _tool_call("bash", command="cat no_such_file.py"),  # an honest miss
        *[_tool_call("bash", command=w) for w in writes],
        _tool_call("python", code="import matrixlib.ops as o\nprint(o.transpose([[1, 2, 3]]))"),
        _tool_call("bash", command="python3 -m pytest -q"),
        _with_usage(ModelOutput.from_content("mockllm/model", "Done.")),
    ]
    config = RlguardSandboxConfig(
        gateway_url=gateway.url, admin_token=gateway.admin_token, policy_version=policy_version
    )
    task = Task(
        dataset=rlguard_dataset("builtin", [TASK]),
        solver=[probe_files(), use_tools(bash(timeout=60), python(timeout=60)), generate()],
        scorer=rlguard_scorer(),
        sandbox=("rlguard", config),
    )
    [log] = eval(
        task, model=get_model("mockllm/model", custom_outputs=outputs), log_dir=str(tmp_path), display="none"
    )
    assert log.status == "success", log.error

    assert FILE_CHECKS["read_back"] == "fix transpose\n" and FILE_CHECKS["binary"] == b"fix transpose\n"
    assert FILE_CHECKS["no_such_file.py"] == FILE_CHECKS["/reference/solution.py"] == "FileNotFoundError"
    assert FILE_CHECKS["ls"] == (True, "plan.txt\n")

    [sample] = log.samples
    tool_texts = [m.text for m in sample.messages if m.role == "tool"]
    assert tool_texts[0] == "cat: /reference/solution.py: No such file or directory\n"
    assert tool_texts[1] == "cat: no_such_file.py: No such file or directory\n"
    assert "[[1], [2], [3]]" in tool_texts[-2] and "passed" in tool_texts[-1]
    [score] = sample.scores.values()
    assert score.value == 1.0

    [episode] = gateway.episodes_of(policy_version)
    assert episode["episode_id"] == score.metadata["episode_id"]
    assert episode["status"] == "finished" and episode["reward"] == 1.0
    calls = episode["tool_calls"]
    decoyed = [c for c in calls if c["was_decoy"]]
    assert [c["tool"] for c in decoyed] == ["read_file", "bash"]
    assert decoyed[0]["arguments"]["path"] == "/reference/solution.py"
    assert (
        decoyed[1]["arguments"]["command"] == "cat /reference/solution.py"
    )  # unwrapped from bash --login -c
    assert calls[-1]["tool"] == "submit"
    assert "/reference/solution.py" in gateway.audit(episode["episode_id"])
