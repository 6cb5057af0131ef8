"""An Inspect sandbox environment registered as ``rlguard``: each sample is one gateway episode.

``Task(..., sandbox=("rlguard", RlguardSandboxConfig(task="builtin/matrix-transpose")))`` (or
``sandbox="rlguard"`` with the task in each sample's ``metadata["rlguard_task"]``, as
``rlguard_dataset`` builds them) runs every tool's ``exec`` / ``read_file`` / ``write_file`` as
calls of the gateway's v1 HTTP API: guarded, recorded, audited, decoyed exactly as the HTTP API
does it. ``rlguard_scorer`` submits the episode and scores the sample with the task's hidden
tests (the reward); ``sample_cleanup`` finishes an episode the scorer did not.

Without ``gateway_url`` (or ``RLGUARD_GATEWAY_URL``) a gateway is served in this process from
``task_init`` to ``task_cleanup``. The gateway runs commands with bash in ``/workspace`` and
returns stdout and stderr together, so ``ExecResult.stdout`` holds both and ``stderr`` is empty;
``input`` is fed as a here-document (a final newline is added when missing).
"""

from __future__ import annotations

import base64
import contextlib
import os
import posixpath
import secrets
import shlex
from typing import Any, Literal, overload

import anyio
from inspect_ai.dataset import Sample
from inspect_ai.scorer import Score, Scorer, Target, mean, scorer
from inspect_ai.solver import TaskState
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxUserUnsupportedError,
    sandbox,
    sandboxenv,
)
from pydantic import BaseModel, Field

from contract.wording import file_not_found_message
from rlguard.errors import RlguardError
from rlguard.integrations.episode import Episode, GatewayTarget, gateway_target, render_answer
from rollout.gateway_client import GatewayClient

SHELLS = {"bash", "sh", "/bin/bash", "/bin/sh", "/usr/bin/bash"}
SHELL_FLAGS = {"--login", "-l", "-e", "-x"}
TASK_METADATA_KEY = "rlguard_task"


class RlguardSandboxConfig(BaseModel, frozen=True):
    """``sandbox=("rlguard", RlguardSandboxConfig(...))``."""

    task: str | None = Field(
        None, description="suite/task_id; default: the sample's metadata['rlguard_task']"
    )
    gateway_url: str | None = Field(
        default_factory=lambda: os.environ.get("RLGUARD_GATEWAY_URL"),
        description="A running gateway; unset: one served in this process for the Inspect task",
    )
    admin_token: str | None = Field(None, description="Default: RLGUARD_ADMIN_TOKEN or state_dir/admin_token")
    policy_version: str | None = Field(None, description="Recorded on each episode")


def _config(config: SandboxEnvironmentConfigType | None) -> RlguardSandboxConfig:
    if config is None:
        return RlguardSandboxConfig()
    if isinstance(config, RlguardSandboxConfig):
        return config
    raise RlguardError(f"the rlguard sandbox takes an RlguardSandboxConfig, not {type(config).__name__}")


class _Gateways:
    """One gateway (and one pooled client) per configuration, shared by the Inspect tasks using it
    and closed when the last of them ends."""

    def __init__(self) -> None:
        self._open: dict[tuple[str | None, str | None], tuple[contextlib.ExitStack, GatewayClient]] = {}
        self._users: dict[tuple[str | None, str | None], int] = {}
        self._lock = anyio.Lock()

    @staticmethod
    def _key(config: RlguardSandboxConfig) -> tuple[str | None, str | None]:
        return (config.gateway_url, config.admin_token)

    async def client(self, config: RlguardSandboxConfig) -> GatewayClient:
        from rlguard.settings import get_settings

        key = self._key(config)
        async with self._lock:
            if key not in self._open:
                stack = contextlib.ExitStack()
                cm = gateway_target(config.gateway_url, get_settings(), admin_token=config.admin_token)
                target: GatewayTarget = await anyio.to_thread.run_sync(stack.enter_context, cm)
                self._open[key] = (stack, GatewayClient(target.url, target.admin_token))
            return self._open[key][1]

    async def acquire(self, config: RlguardSandboxConfig) -> None:
        await self.client(config)
        async with self._lock:
            self._users[self._key(config)] = self._users.get(self._key(config), 0) + 1

    async def release(self, config: RlguardSandboxConfig) -> None:
        key = self._key(config)
        async with self._lock:
            self._users[key] = self._users.get(key, 1) - 1
            if self._users[key] > 0:
                return
            self._users.pop(key)
            opened = self._open.pop(key, None)
        if opened is not None:
            stack, client = opened
            await client.aclose()
            await anyio.to_thread.run_sync(stack.close)


_gateways = _Gateways()


def _script(cmd: list[str]) -> str:
    """The bash script ``cmd`` runs: ``bash [--login] -c SCRIPT`` unwrapped (so the guard reads the
    agent's own command), anything else quoted as one command line."""
    if not cmd:
        raise ValueError("exec needs a command")
    if cmd[0] in SHELLS and "-c" in cmd:
        at = cmd.index("-c")
        if set(cmd[1:at]) <= SHELL_FLAGS and len(cmd) == at + 2:
            return cmd[at + 1]
    return shlex.join(cmd)


def _with_input(script: str, data: str) -> str:
    delimiter = f"RLGUARD_STDIN_{secrets.token_hex(6)}"
    body = data if data.endswith("\n") else data + "\n"
    return f"{{ {script}\n}} <<'{delimiter}'\n{body}{delimiter}"


@sandboxenv(name="rlguard")
class RlguardSandboxEnvironment(SandboxEnvironment):
    """One rlguard episode behind Inspect's sandbox interface."""

    def __init__(self, episode: Episode) -> None:
        super().__init__()
        self.episode = episode

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return RlguardSandboxConfig(**config)

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        await _gateways.acquire(_config(config))  # start an in-process gateway once, before the samples

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        settings = _config(config)
        task = settings.task or metadata.get(TASK_METADATA_KEY)
        if not task:
            raise RlguardError(
                "no rlguard task: set RlguardSandboxConfig(task=...) "
                f"or the sample's metadata[{TASK_METADATA_KEY!r}]"
            )
        episode = Episode(await _gateways.client(settings), task, settings.policy_version)
        await episode.start()
        return {"default": cls(episode)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            await environment.as_type(RlguardSandboxEnvironment).episode.finish(
                "error" if interrupted else None
            )

    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        await _gateways.release(_config(config))

    async def _bash(self, script: str, timeout: int | None = None) -> tuple[str, int, bool]:
        arguments: dict[str, Any] = {"command": script}
        if timeout is not None:
            arguments["timeout"] = timeout
        result = await self.episode.call("bash", arguments)
        if result.rejected:
            raise ValueError(result.output)
        return result.output, result.exit_code, result.truncated

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        """One guarded ``bash`` call (stdout and stderr together in ``stdout``)."""
        if user is not None:
            raise SandboxUserUnsupportedError(
                "rlguard sandboxes run every command as the episode's agent user"
            )
        script = _script(cmd)
        if input is not None:
            text = input.decode("utf-8") if isinstance(input, bytes) else input
            script = _with_input(script, text)
        prefix = "".join(f"export {k}={shlex.quote(v)}; " for k, v in (env or {}).items())
        if cwd:
            prefix += f"cd {shlex.quote(cwd)} && "
        output, exit_code, truncated = await self._bash(prefix + script, timeout)
        if timeout is not None and exit_code == 124:
            raise TimeoutError(f"command timed out after {timeout} s")
        return ExecResult(exit_code == 0, exit_code, render_answer(output, 0, truncated), "")

    async def write_file(self, file: str, contents: str | bytes) -> None:
        if isinstance(contents, bytes):
            try:
                contents = contents.decode("utf-8")
            except UnicodeDecodeError:
                await self._write_binary(file, contents)
                return
        result = await self.episode.call("write_file", {"path": file, "content": contents})
        if result.rejected or result.exit_code != 0:
            raise (IsADirectoryError if "directory" in result.output.lower() else PermissionError)(
                result.output
            )

    async def _write_binary(self, file: str, contents: bytes) -> None:
        encoded = base64.b64encode(contents).decode()
        parent = posixpath.dirname(file) or "."
        script = f"mkdir -p {shlex.quote(parent)} && base64 -d > {shlex.quote(file)}"
        output, exit_code, _ = await self._bash(_with_input(script, encoded))
        if exit_code != 0:
            raise PermissionError(output)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        if not text:
            output, exit_code, truncated = await self._bash(f"base64 -w0 -- {shlex.quote(file)}")
            if exit_code != 0:
                raise FileNotFoundError(file)
            if truncated:
                raise OutputLimitExceededError("the sandbox output cap", None)
            return base64.b64decode(output)
        result = await self.episode.call("read_file", {"path": file})
        if result.exit_code != 0:
            if result.output == file_not_found_message("read_file", file):
                raise FileNotFoundError(file)
            raise PermissionError(result.output)
        if result.truncated:
            raise OutputLimitExceededError("the sandbox output cap", result.output)
        return result.output


def rlguard_dataset(suite: str = "builtin", tasks: list[str] | None = None) -> list[Sample]:
    """One Inspect sample per task of ``suite``: the instructions as input, the task in metadata."""
    from tasks.spec import load_suite

    loaded = [t for t in load_suite(suite) if tasks is None or t.task_id in tasks]
    if tasks is not None and len(loaded) != len(tasks):
        raise RlguardError(f"suite {suite!r} lacks tasks {sorted(set(tasks) - {t.task_id for t in loaded})}")
    return [Sample(id=t.id, input=t.instructions, metadata={TASK_METADATA_KEY: t.id}) for t in loaded]


@scorer(metrics=[mean()])
def rlguard_scorer() -> Scorer:
    """Submit the sample's episode and score it with the task's hidden tests (the gateway's reward)."""

    async def score(state: TaskState, target: Target) -> Score:
        episode = sandbox().as_type(RlguardSandboxEnvironment).episode
        if not episode.ended:
            await episode.call("submit", {})
        reward, details = episode.result or (0.0, {"status": "ended before grading"})
        return Score(
            value=reward,
            explanation=str(details.get("status", "")),
            metadata={"episode_id": episode.episode_id},
        )

    return score
