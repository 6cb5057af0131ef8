"""A mini-swe-agent environment whose ``execute`` runs through an rlguard gateway episode.

Use it from any mini-swe-agent config::

    environment:
      environment_class: rlguard.integrations.mini_swe_agent.RlguardEnvironment
      task: builtin/matrix-transpose
      gateway_url: http://127.0.0.1:8765      # optional: default RLGUARD_GATEWAY_URL, else in-process

Each environment is one gateway episode, created when the environment is built (so its sandbox is
ready before the first step). Every command is a ``bash`` call of the v1 HTTP API: guarded,
recorded, audited; a decoyed command comes back exactly as a real one would. mini-swe-agent's own
finish convention (a command whose output starts with ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``)
calls ``submit`` and finishes the episode, which grades it; the reward is in the ``Submitted``
message's ``extra.rlguard``. ``close()`` finishes an episode the agent left without submitting
(a ``RepeatedFormatError``, a step limit), and so does the end of the process: ``mini`` never
closes its environment, so an exit hook does it while the client's loop thread still runs.

The model's turns train too when they go through the episode's model proxy: ``RlguardModel``
(``model_class``) is mini-swe-agent's LiteLLM model with the current episode's proxy as its base URL
and the episode's agent token as its key; any other model leaves the episode audit-only.

mini-swe-agent is synchronous; the async gateway client runs on a private event loop in a daemon
thread, so a process that forgets to close the environment still exits.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shlex
import threading
from typing import Any

from minisweagent.exceptions import Submitted
from minisweagent.models.litellm_model import LitellmModel
from minisweagent.utils.serialize import recursive_merge
from pydantic import BaseModel, Field

from rlguard.errors import RlguardError
from rlguard.integrations.episode import Episode, EpisodeEnded, gateway_target, render_answer
from rlguard.integrations.loop_thread import LoopThread, close_at_exit
from rollout.gateway_client import GatewayClient

_current = threading.local()  # the environment built last in this thread: RlguardModel's episode

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
WORKSPACE = "/workspace"


class RlguardEnvironmentConfig(BaseModel):
    """The environment's keys in a mini-swe-agent config (``environment:``)."""

    task: str = Field(description="The gateway's task, suite/task_id, e.g. builtin/matrix-transpose")
    gateway_url: str | None = Field(
        default_factory=lambda: os.environ.get("RLGUARD_GATEWAY_URL"),
        description="A running gateway; unset: one served in this process",
    )
    admin_token: str | None = Field(None, description="Default: RLGUARD_ADMIN_TOKEN or state_dir/admin_token")
    policy_version: str | None = Field(None, description="Recorded on the episode")
    cwd: str = Field("", description="Directory commands run in; default /workspace")
    env: dict[str, str] = Field(default_factory=dict, description="Exported before each command")
    timeout: int = Field(60, gt=0, description="Seconds before a command is killed")


class RlguardEnvironment:
    """mini-swe-agent ``Environment`` protocol over one rlguard gateway episode."""

    def __init__(self, *, config_class: type = RlguardEnvironmentConfig, **kwargs: Any) -> None:
        from rlguard.settings import get_settings

        self.config = config_class(**kwargs)
        self._stack = contextlib.ExitStack()
        self.submitted = False
        self.gateway_url = ""
        try:
            self._loop = LoopThread("rlguard-mini-swe-agent")
            self._stack.callback(self._loop.stop)
            target = self._stack.enter_context(
                gateway_target(self.config.gateway_url, get_settings(), admin_token=self.config.admin_token)
            )
            self.gateway_url = target.url
            client = self._loop.call(self._client, target.url, target.admin_token)
            self._stack.callback(self._loop.call, client.aclose)
            self.episode = Episode(client, self.config.task, self.config.policy_version)
            self._stack.callback(self._finish_quietly)
            self._loop.call(self.episode.start)
        except BaseException:
            self._stack.close()
            raise
        close_at_exit(self)
        _current.environment = self

    @staticmethod
    async def _client(url: str, token: str) -> GatewayClient:
        return GatewayClient(url, token)

    @property
    def model_base_url(self) -> str:
        """The episode's OpenAI-compatible model endpoint (the recording proxy)."""
        return f"{self.gateway_url}/v1/episodes/{self.episode_id}/model/v1"

    @property
    def agent_token(self) -> str:
        """The episode's agent token: the API key of its model endpoint."""
        assert self.episode.handle is not None
        return self.episode.handle.agent_token

    @property
    def episode_id(self) -> str | None:
        return self.episode.episode_id

    def _command(self, command: str, cwd: str) -> str:
        prefix = "".join(f"export {k}={shlex.quote(v)}; " for k, v in self.config.env.items())
        directory = cwd or self.config.cwd
        if directory and directory.rstrip("/") != WORKSPACE:
            prefix += f"cd {shlex.quote(directory)} && "
        return prefix + command

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run ``action["command"]`` as one guarded ``bash`` call; the answer as mini-swe-agent reads it."""
        arguments = {
            "command": self._command(action.get("command", ""), cwd),
            "timeout": timeout or self.config.timeout,
        }
        try:
            result = self._loop.call(self.episode.call, "bash", arguments)
        except EpisodeEnded as exc:
            return {"output": "", "returncode": -1, "exception_info": str(exc)}
        if result.rejected:  # the gateway refused the arguments (422); nothing ran
            return {"output": "", "returncode": result.exit_code, "exception_info": result.output}
        output = {
            "output": render_answer(result.output, 0, result.truncated),
            "returncode": result.exit_code,
            "exception_info": "",
        }
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        """mini-swe-agent's finish convention; here it submits and grades the episode."""
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if not (lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0):
            return
        self._loop.call(self.episode.call, "submit", {})
        self.submitted = True
        submission = "".join(lines[1:])
        reward, details = self.episode.result or (None, {})
        raise Submitted(
            {
                "role": "exit",
                "content": submission,
                "extra": {
                    "exit_status": "Submitted",
                    "submission": submission,
                    "rlguard": {"episode_id": self.episode_id, "reward": reward, "details": details},
                },
            }
        )

    def _finish_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self._loop.call(self.episode.finish, None)

    def close(self) -> None:
        """Finish the episode if the agent did not submit (graded as left), stop the client.
        Idempotent; also run at the end of the process."""
        self._stack.close()
        if getattr(_current, "environment", None) is self:
            _current.environment = None

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        config = self.config.model_dump(exclude={"admin_token"})
        episode = {"episode_id": self.episode_id, "model_base_url": self.model_base_url}
        return recursive_merge(config, episode, platform.uname()._asdict(), kwargs)

    def serialize(self) -> dict[str, Any]:
        config = self.config.model_dump(mode="json", exclude={"admin_token"})
        return {
            "info": {
                "config": {
                    "environment": config,
                    "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                },
                "rlguard": {"episode_id": self.episode_id, "model_base_url": self.model_base_url},
            }
        }


def current_environment() -> RlguardEnvironment:
    """The rlguard environment built last in this thread and not closed (``mini`` and its batch
    runners build one model and one environment per thread)."""
    environment = getattr(_current, "environment", None)
    if environment is None:
        raise RlguardError(
            "RlguardModel needs an rlguard environment in the same thread: set environment_class to "
            "rlguard.integrations.mini_swe_agent.RlguardEnvironment"
        )
    return environment


class RlguardModel(LitellmModel):
    """mini-swe-agent's LiteLLM model, sent through the current episode's recording model proxy.

    ``model_name`` is a LiteLLM name of an OpenAI-compatible provider (``hosted_vllm/NAME``,
    ``openai/NAME``); the base URL and key are the episode's (``api_base`` / ``api_key`` in
    ``model_kwargs`` are overridden), so every turn is recorded with its token ids and trains.
    """

    def _query(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
        environment = current_environment()
        routed = {"api_base": environment.model_base_url, "api_key": environment.agent_token}
        return super()._query(messages, **{**kwargs, **routed})
