"""The agent loop: one episode of a policy on a task, through the gateway, token in and token out.

The runner owns the context as a list of token ids. It renders the first prompt once with the chat
template, then only appends: the policy's generated ids (mask 1, with their logprobs), the turn's
closing markup, the tool answers tokenised on their own (mask 0). It parses ``<tool_call>`` JSON from
the generated text, runs the calls through the gateway, and stops on ``submit``, max turns, max
generated tokens, the time budget, or an unrecoverable policy/gateway error; then it uploads every
sub-trajectory and asks the gateway to grade (``finish``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from rollout.chat_format import ChatFormat, ParseError, parse_tool_calls, tool_call_text
from rollout.compaction import Turn, compacted, needs_compaction, request_ids
from rollout.gateway_client import EpisodeHandle, GatewayClient, GatewayError, ToolResult
from rollout.policy import ChatPolicy, PolicyError, Sampling, TokenPolicy
from rollout.settings import RolloutSettings
from rollout.trajectory import SubTrajectory

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a software engineering agent. You work in a repository at /workspace through the tools "
    "below. Make the change the task asks for, check it with the tests, then call submit."
)
NO_TOOL_CALL = (
    "Error: no tool call found. Call a tool inside <tool_call></tool_call> tags, "
    'e.g. <tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>, or call submit.'
)


@dataclass(frozen=True)
class AgentConfig:
    """Limits of one episode (defaults from ``RolloutSettings``)."""

    max_turns: int = 30
    max_tokens: int = 16384
    max_tokens_per_turn: int = 512
    context_budget_tokens: int = 4096
    keep_recent_turns: int = 2
    summary_max_tokens: int = 256
    episode_timeout_s: float = 900.0
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    system_prompt: str = SYSTEM_PROMPT

    @classmethod
    def from_settings(cls, s: RolloutSettings, **overrides: Any) -> AgentConfig:
        """The configured values (``RLGUARD_ROLLOUT__*``) with the non-None ``overrides`` on top."""
        values = {
            "max_turns": s.max_turns,
            "max_tokens": s.max_tokens,
            "max_tokens_per_turn": s.max_tokens_per_turn,
            "context_budget_tokens": s.context_budget_tokens,
            "keep_recent_turns": s.keep_recent_turns,
            "episode_timeout_s": s.episode_timeout_s,
            "temperature": s.temperature,
            "top_p": s.top_p,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


# How an episode ended (``EpisodeResult.status``, sent to the gateway as ``finish``'s ``end_reason``):
# the agent ended it, a limit did (the trainer treats the graded reward as the outcome, terminal), or
# the infrastructure failed (policy server, gateway, upload): such an episode says nothing about the
# policy and is never trained on.
LIMIT_END_REASONS = frozenset({"max_turns", "max_tokens", "timeout", "context_full"})
INFRASTRUCTURE_END_REASONS = frozenset({"error"})


@dataclass
class EpisodeResult:
    task: str
    episode_id: str | None = None
    # submitted | max_turns | max_tokens | timeout | context_full | error | infra_error (the gateway's
    # infrastructure failed under the episode: recorded, never trained; the runner may run it again)
    status: str = "running"
    reward: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    turns: int = 0
    tool_calls: int = 0
    rejected_calls: int = 0
    parse_errors: int = 0
    generated_tokens: int = 0
    compactions: int = 0
    sub_trajectories: list[SubTrajectory] = field(default_factory=list)
    overhead_ms: list[float] = field(default_factory=list)  # runner's own time per turn
    model_s: float = 0.0
    gateway_s: float = 0.0
    wall_s: float = 0.0
    error: str | None = None

    @property
    def end_reason(self) -> str:
        """The rollout's word for how the episode ended (what ``finish`` recorded for the trainer)."""
        return self.status

    @property
    def trainable(self) -> bool:
        """Worth handing to the trainer: stored, with token-level sub-trajectories, and not ended by
        an infrastructure error (the trainer would mark it unusable anyway)."""
        return (
            bool(self.episode_id and self.sub_trajectories)
            and self.status not in INFRASTRUCTURE_END_REASONS
            and all(t.trainable for t in self.sub_trajectories)
        )


def render_tool_result(result: ToolResult) -> str:
    """What the model reads for one call: the output, and the exit code when it is not 0."""
    if result.exit_code != 0 and not result.rejected:
        return f"{result.output}\n[exit code: {result.exit_code}]"
    return result.output


class _Episode:
    """State of one running episode (token mode)."""

    def __init__(
        self,
        gateway: GatewayClient,
        policy: TokenPolicy,
        fmt: ChatFormat,
        config: AgentConfig,
        result: EpisodeResult,
        handle: EpisodeHandle,
    ) -> None:
        self.gateway, self.policy, self.fmt, self.config = gateway, policy, fmt, config
        self.result, self.handle = result, handle
        self.turn_reserve = len(fmt.generation_prompt_ids) + config.max_tokens_per_turn
        self.recent: list[Turn] = []
        self.prefix: list[int] = []
        self.traj: SubTrajectory | None = None

    def _new_traj(self) -> SubTrajectory:
        traj = SubTrajectory(
            index=len(self.result.sub_trajectories),
            policy_version=self.policy.policy_version,
            trainable=self.policy.trainable,
        )
        self.result.sub_trajectories.append(traj)
        return traj

    async def _generate(self, traj: SubTrajectory, max_tokens: int) -> list[int]:
        sampling = Sampling(
            max_tokens=max_tokens,
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            seed=None if self.config.seed is None else self.config.seed + self.result.generated_tokens,
            stop_token_ids=tuple(self.fmt.stop_token_ids),
        )
        generation = await self.policy.generate(traj.token_ids, sampling)
        self.result.model_s += generation.model_seconds
        traj.add_generated(generation.token_ids, generation.logprobs, generation.policy_version)
        self.result.generated_tokens += len(generation.token_ids)
        return generation.token_ids

    async def _compact(self) -> bool:
        """Summarise and switch to a fresh sub-trajectory; False when even that cannot fit."""
        assert self.traj is not None
        old = self.traj
        old.add_context(request_ids(self.fmt))
        summary_ids = await self._generate(old, self.config.summary_max_tokens)
        new = compacted(
            self.fmt,
            self.prefix,
            self.fmt.assistant_text(summary_ids),
            self.recent if self.config.keep_recent_turns else [],
            index=len(self.result.sub_trajectories),
            policy_version=self.policy.policy_version,
            trainable=self.policy.trainable,
            budget=self.config.context_budget_tokens,
            turn_reserve=self.turn_reserve,
        )
        if new is None:
            return False
        self.result.sub_trajectories.append(new)
        self.result.compactions += 1
        self.traj = new
        return True

    async def _run_calls(self, text: str) -> tuple[list[str], bool]:
        """Run the turn's tool calls in order; returns what the model reads and whether it submitted."""
        parsed = parse_tool_calls(text)
        if not parsed:
            self.result.parse_errors += 1
            return [NO_TOOL_CALL], False
        outputs: list[str] = []
        for call in parsed:
            if isinstance(call, ParseError):
                self.result.parse_errors += 1
                outputs.append(call.message)
                continue
            result = await self.gateway.call(self.handle, call.name, call.arguments)
            self.result.gateway_s += result.seconds
            self.result.tool_calls += 1
            self.result.rejected_calls += int(result.rejected)
            outputs.append(render_tool_result(result))
            if call.name == "submit" and not result.rejected:
                return outputs, True
        return outputs, False

    async def run(self, instructions: str, tools: list[dict[str, Any]], deadline: float) -> None:
        config, fmt, result = self.config, self.fmt, self.result
        self.prefix = fmt.prompt_ids(config.system_prompt, instructions, tools)
        self.traj = self._new_traj()
        self.traj.add_context(self.prefix)
        while True:
            if result.turns >= config.max_turns:
                result.status = "max_turns"
                return
            if result.generated_tokens >= config.max_tokens:
                result.status = "max_tokens"
                return
            if time.monotonic() >= deadline:
                result.status = "timeout"
                return
            turn_started = time.perf_counter()
            model_before, gateway_before = result.model_s, result.gateway_s
            over_budget = needs_compaction(len(self.traj), self.turn_reserve, config.context_budget_tokens)
            if over_budget and not await self._compact():
                result.status = "context_full"
                return
            traj = self.traj
            turn_start = len(traj)
            traj.add_context(fmt.generation_prompt_ids)
            budget_left = config.max_tokens - result.generated_tokens
            generated = await self._generate(traj, min(config.max_tokens_per_turn, budget_left))
            traj.add_context(fmt.close_turn_ids(generated))
            result.turns += 1
            outputs, submitted = await self._run_calls(fmt.assistant_text(generated))
            if not submitted:
                traj.add_context(fmt.tool_responses_ids(outputs))
                self.recent.append(Turn(traj.token_ids[turn_start:]))
                del self.recent[: -max(config.keep_recent_turns, 1)]
            spent = time.perf_counter() - turn_started
            model_gateway = (result.model_s - model_before) + (result.gateway_s - gateway_before)
            result.overhead_ms.append(max(0.0, spent - model_gateway) * 1000)
            if submitted:
                result.status = "submitted"
                return


async def run_episode(
    gateway: GatewayClient,
    policy: TokenPolicy | ChatPolicy,
    fmt: ChatFormat,
    task_id: str,
    instructions: str,
    config: AgentConfig,
    tools: list[dict[str, Any]] | None = None,
) -> EpisodeResult:
    """One episode end to end: create, loop, upload sub-trajectories, finish (grade).

    Errors of the policy or the gateway end the episode with status ``error`` but still grade it and
    upload what was produced, so no finished work is lost and the trainer sees the failure's reward.
    So does a cancellation (Ctrl-C in ``rlguard rollout run``): the episode is uploaded and finished
    (``error``, "interrupted") before the cancellation goes on, instead of being left ``running``.
    """
    result = EpisodeResult(task=task_id)
    started = time.monotonic()
    handle = await gateway.create_episode(task_id, policy.policy_version)
    result.episode_id = handle.episode_id
    cancelled = False
    deadline = started + config.episode_timeout_s
    try:
        tool_schemas = tools or handle.tools or await gateway.tools()
        if isinstance(policy, TokenPolicy):
            episode = _Episode(gateway, policy, fmt, config, result, handle)
            await asyncio.wait_for(
                episode.run(instructions, tool_schemas, deadline), config.episode_timeout_s
            )
        else:
            await _run_chat(
                gateway, policy, fmt, config, result, handle, instructions, tool_schemas, deadline
            )
    except TimeoutError:
        result.status = "timeout"
    except (PolicyError, GatewayError) as exc:
        result.status, result.error = _error_status(exc), str(exc)
        log.warning("episode %s of %s ended by an error: %s", handle.episode_id, task_id, exc)
    except asyncio.CancelledError:
        cancelled = True
        result.status, result.error = "error", "interrupted before the episode ended"
    # Uploading and finishing are not given up half way: an interrupt arriving now waits for them
    # (a second Ctrl-C still stops the process), or the episode would stay running with its work lost.
    wrap_up = asyncio.ensure_future(_upload_and_finish(gateway, handle, result))
    try:
        await asyncio.shield(wrap_up)
    except asyncio.CancelledError:
        cancelled = True
        await wrap_up
    result.wall_s = time.monotonic() - started
    if cancelled:  # finished and graded; now let the cancellation go on
        raise asyncio.CancelledError
    return result


async def _upload_and_finish(gateway: GatewayClient, handle: EpisodeHandle, result: EpisodeResult) -> None:
    """Upload the sub-trajectories, then grade the episode (``finish`` with the end reason).

    A sub-trajectory the policy generated nothing in (the episode ended right after a compaction,
    or the first generation failed) has nothing to train on; only a trailing one can be empty.
    Uploads come before ``finish``: the trainer takes only ended episodes, so it can never see one
    whose last sub-trajectory has not arrived yet.
    """
    result.sub_trajectories = [t for t in result.sub_trajectories if t.num_action_tokens]
    try:
        for traj in result.sub_trajectories:
            await gateway.upload_subtrajectory(handle.episode_id, traj.to_record())
    except GatewayError as exc:
        result.status, result.error = (
            "error",
            f"{result.error}; upload: {exc}" if result.error else f"upload: {exc}",
        )
    try:
        result.reward, result.details = await gateway.finish(handle, _end_reason(result.status))
    except GatewayError as exc:
        result.error = f"{result.error}; finish: {exc}" if result.error else f"finish: {exc}"
        result.status = "infra_error" if result.status == "infra_error" else _error_status(exc)
    if result.details.get("status") == "infra_error":  # the engine died while it was graded
        result.status = "infra_error"


def _error_status(exc: Exception) -> str:
    """``infra_error`` when the gateway ended the episode for its infrastructure, else ``error``."""
    return "infra_error" if getattr(exc, "episode_status", None) == "infra_error" else "error"


def _end_reason(status: str) -> str:
    """The end reason sent with ``finish`` (the contract's names; an infra error is an error)."""
    return "error" if status == "infra_error" else status


async def _run_chat(
    gateway: GatewayClient,
    policy: ChatPolicy,
    fmt: ChatFormat,
    config: AgentConfig,
    result: EpisodeResult,
    handle: EpisodeHandle,
    instructions: str,
    tools: list[dict[str, Any]],
    deadline: float,
) -> None:
    """Chat-completions mode for endpoints without token ids: recorded, but not trainable.

    The stored token ids are this runner's tokenisation of the same conversation (the server's own
    tokens are unknown), so the sub-trajectory is marked ``trainable=False``. No compaction here: the
    endpoint manages its own context.
    """
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": config.system_prompt},
        {"role": "user", "content": instructions},
    ]
    traj = SubTrajectory(index=0, policy_version=policy.policy_version, trainable=False)
    result.sub_trajectories.append(traj)
    traj.add_context(fmt.prompt_ids(config.system_prompt, instructions, tools))
    sampling = Sampling(
        max_tokens=config.max_tokens_per_turn, temperature=config.temperature, top_p=config.top_p
    )
    while result.turns < config.max_turns and time.monotonic() < deadline:
        turn_started = time.perf_counter()
        turn = await policy.chat(messages, tools, sampling)
        result.model_s += turn.model_seconds
        result.turns += 1
        calls = []
        for raw in turn.tool_calls:
            function = raw.get("function") or {}
            calls.append((raw.get("id"), function.get("name", ""), function.get("arguments") or "{}"))
        text = turn.text + "".join(
            ("\n" if turn.text or i else "") + tool_call_text(name, _json_args(args))
            for i, (_, name, args) in enumerate(calls)
        )
        generated = [*fmt.encode(text), fmt.im_end_id]
        traj.add_context(fmt.generation_prompt_ids)
        traj.add_generated(generated, [0.0] * len(generated))
        traj.add_context(fmt.close_turn_ids(generated))
        result.generated_tokens += len(generated)
        messages.append({"role": "assistant", "content": turn.text, "tool_calls": turn.tool_calls or None})
        gateway_before = result.gateway_s
        outputs, submitted = [], False
        if not calls:
            result.parse_errors += 1
            outputs.append(NO_TOOL_CALL)
            messages.append({"role": "user", "content": NO_TOOL_CALL})
        for call_id, name, args in calls:
            arguments = _json_args(args)
            if arguments is None:
                output = "Error: the tool call's arguments are not a JSON object."
                result.parse_errors += 1
            else:
                tool_result = await gateway.call(handle, name, arguments)
                result.gateway_s += tool_result.seconds
                result.tool_calls += 1
                submitted = submitted or (name == "submit" and not tool_result.rejected)
                output = render_tool_result(tool_result)
            outputs.append(output)
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        spent = time.perf_counter() - turn_started
        result.overhead_ms.append(
            max(0.0, spent - turn.model_seconds - (result.gateway_s - gateway_before)) * 1000
        )
        if submitted:
            result.status = "submitted"
            return
        traj.add_context(fmt.tool_responses_ids(outputs))
    result.status = "max_turns" if result.turns >= config.max_turns else "timeout"


def _json_args(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
