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
message's ``extra.rlguard``. ``close()`` (or garbage collection) finishes an episode the agent
left without submitting.

mini-swe-agent is synchronous; the async gateway client runs on a private event loop thread
(an anyio blocking portal).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shlex
from typing import Any

from anyio.from_thread import start_blocking_portal
from minisweagent.exceptions import Submitted
from minisweagent.utils.serialize import recursive_merge
from pydantic import BaseModel, Field

from rlguard.integrations.episode import Episode, EpisodeEnded, gateway_target, render_answer
from rollout.gateway_client import GatewayClient

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
        try:
            self._portal = self._stack.enter_context(start_blocking_portal())
            target = self._stack.enter_context(
                gateway_target(self.config.gateway_url, get_settings(), admin_token=self.config.admin_token)
            )
            client = self._portal.call(GatewayClient, target.url, target.admin_token)
            self._stack.callback(self._portal.call, client.aclose)
            self.episode = Episode(client, self.config.task, self.config.policy_version)
            self._stack.callback(self._finish_quietly)
            self._portal.call(self.episode.start)
        except BaseException:
            self._stack.close()
            raise

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
            result = self._portal.call(self.episode.call, "bash", arguments)
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
        self._portal.call(self.episode.call, "submit", {})
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
            self._portal.call(self.episode.finish, None)

    def close(self) -> None:
        """Finish the episode if the agent did not submit (graded as left), stop the client."""
        self._stack.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        config = self.config.model_dump(exclude={"admin_token"})
        return recursive_merge(config, platform.uname()._asdict(), kwargs)

    def serialize(self) -> dict[str, Any]:
        config = self.config.model_dump(mode="json", exclude={"admin_token"})
        return {
            "info": {
                "config": {
                    "environment": config,
                    "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                },
                "rlguard": {"episode_id": self.episode_id},
            }
        }
