"""The runner goes to the container as one program: every module of ``sandbox/inside/`` is in it, and
it runs in a bare interpreter where no ``sandbox`` package exists (no engine needed)."""

import json
import subprocess
import sys
from pathlib import Path

from sandbox import runner_protocol

MAIN = 'sys.modules["sandbox.inside.executor"].main()\n'


def test_every_module_of_the_runner_is_shipped() -> None:
    inside = Path(runner_protocol.__file__).parent / "inside"
    modules = {path.stem for path in inside.glob("*.py")} - {"__init__"}
    assert set(runner_protocol.RUNNER_MODULES) == modules


def test_the_program_answers_in_an_interpreter_without_the_package(tmp_path: Path) -> None:
    program = runner_protocol.RUNNER_PROGRAM
    assert program.endswith(MAIN)
    # Everything but serving (which starts in /workspace): install the modules, answer one request.
    request = json.dumps({"op": "ping", "id": "feed"}).encode() + b"\n"
    probe = program[: -len(MAIN)] + (
        f'sys.stdout.write(sys.modules["sandbox.inside.executor"].answer({request!r}).decode())\n'
    )
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert run.returncode == 0, run.stderr
    reply = json.loads(run.stdout)
    assert reply["ok"] is True and reply["id"] == "feed" and isinstance(reply["pid"], int)
