"""One episode's model turns, stitched into token-level sub-trajectories (DESIGN.md "Harness episodes
are training data").

The rule: a turn whose prompt extends the current sub-trajectory's context token for token continues
it (the new prompt tokens get mask 0, the completion mask 1 with the engine's logprobs); any other
prompt starts a new sub-trajectory. For chat requests the prompt is built so that it extends when it
should: when the harness's messages are the previous request's messages plus, unchanged, the reply
the proxy gave, the prompt is the previous context (the ids the model sampled, never re-tokenised),
the template's end of the assistant turn, and the template's rendering of what the harness added
(tool results, a user turn, the generation prompt). Otherwise the messages are rendered whole:

- ``drift``: the harness sent back the previous reply changed (its own re-rendering, a stripped or
  rewritten message): the context it shows the model is not what the model produced. Counted per
  episode; a new sub-trajectory starts so every row is still exactly what the engine saw (unless
  the whole re-rendering still extends the context token for token: then it continues, still
  counted as drift).
- ``rewrite``: the harness changed earlier history (its compaction or truncation), left the model's
  last turn out (mini-swe-agent drops a reply it cannot parse) or changed the tools: a new
  sub-trajectory, as rlguard's own runner starts one at each compaction.

Plain data and pure logic; the proxy holds one per live episode and writes its rows at the end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from contract.trajectory import MAX_SUB_TRAJECTORY_TOKENS
from gateway.services.chat_render import (
    ChatRenderer,
    MessageKey,
    Reply,
    message_key,
    normalize_messages,
    tools_key,
)
from rollout.trajectory import SubTrajectory

TURN_TEXT_CHARS = 4000
TOOL_RESULT_CHARS = 2000
MAX_MESSAGES_BYTES = 4 * 1024 * 1024

TurnKind = Literal["first", "continued", "drift", "rewrite"]


class RecordingFull(ValueError):
    """The episode has recorded as many turns (or a context as long) as allowed."""


@dataclass(frozen=True)
class PromptPlan:
    """The prompt the engine gets for one turn, and how it relates to the context so far."""

    ids: list[int]
    kind: TurnKind
    extends: bool  # continues the current sub-trajectory
    why: str = ""
    messages: list[dict[str, Any]] | None = None  # the normalised request (chat only)
    keys: tuple[MessageKey, ...] = ()
    tools: str = ""
    tool_results: list[str] = field(default_factory=list)  # what the harness reports its tools said


@dataclass
class TurnLog:
    """One recorded turn, for the episode view and the tool-call matching."""

    sub_index: int
    prompt_start: int  # first new prompt token of the turn in its sub-trajectory
    start: int  # first generated token
    end: int
    kind: TurnKind
    text: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    version: str | None
    at: str
    model_ms: float
    tool_results: list[str] = field(default_factory=list)
    gateway_seqs: list[int | None] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_start": self.prompt_start,
            "start": self.start,
            "end": self.end,
            "kind": self.kind,
            "text": self.text,
            "tool_calls": self.tool_calls,
            "finish_reason": self.finish_reason,
            "version": self.version,
            "at": self.at,
            "model_ms": round(self.model_ms, 2),
            "tool_results": self.tool_results,
            "gateway_seqs": self.gateway_seqs,
        }


@dataclass
class _Last:
    """The previous chat turn: its request, the reply returned, the ids generated."""

    keys: tuple[MessageKey, ...]
    tools: str
    reply: MessageKey
    completion_ids: list[int]


class Recording:
    """The model turns of one episode, as sub-trajectories in the making."""

    def __init__(self, policy_version: str | None, max_turns: int) -> None:
        self.policy_version = policy_version
        self.max_turns = max_turns
        self.subs: list[SubTrajectory] = []
        self.sub_messages: list[list[dict[str, Any]] | None] = []
        self.turns: list[TurnLog] = []
        self.drift = 0
        self.rewrites = 0
        self.closed = False
        self._last: _Last | None = None

    @property
    def context(self) -> list[int]:
        return self.subs[-1].token_ids if self.subs else []

    # -- planning ---------------------------------------------------------------------------------

    def plan_chat(
        self, renderer: ChatRenderer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> PromptPlan:
        """The prompt ids of a chat turn (normalised ``messages``), spliced onto the context when the
        harness continues the conversation as it was sent."""
        self._check_room()
        keys = tuple(message_key(m) for m in messages)
        tkey = tools_key(tools)
        full_text = renderer.render(messages, tools, generation=True)
        last = self._last
        common = dict(messages=messages, keys=keys, tools=tkey)
        if last is None or not self.subs:
            return self._fresh(renderer, full_text, "first", "", **common)
        n = len(last.keys)
        if tkey != last.tools:
            return self._fresh(renderer, full_text, "rewrite", "the tools changed", **common)
        if len(keys) <= n or keys[:n] != last.keys:
            return self._fresh(renderer, full_text, "rewrite", "the harness rewrote its history", **common)
        results = [m["content"][:TOOL_RESULT_CHARS] for m in messages[n + 1 :] if m["role"] == "tool"]
        if keys[n][0] != "assistant":
            why = "the harness left the model's last turn out of its history"
            return self._fresh(renderer, full_text, "rewrite", why, tool_results=results, **common)
        if keys[n] != last.reply:
            why = "the harness sent back the model's last turn changed"
            return self._fresh(renderer, full_text, "drift", why, tool_results=results, **common)
        prefix = renderer.render(messages[: n + 1], tools, generation=False)
        if not full_text.startswith(prefix):
            why = "the chat template renders earlier turns differently once a turn follows"
            return self._fresh(renderer, full_text, "rewrite", why, tool_results=results, **common)
        ids = [
            *self.context,
            *renderer.close_turn(last.completion_ids),
            *renderer.encode(full_text[len(prefix) :]),
        ]
        return PromptPlan(ids, "continued", True, tool_results=results, **common)

    def plan_completion(self, prompt_ids: list[int]) -> PromptPlan:
        """A text-completions turn: it continues the sub-trajectory when it extends it token for token."""
        self._check_room()
        self._last = None  # a completions turn leaves no chat conversation to continue
        context = self.context
        if not self.subs:
            return PromptPlan(prompt_ids, "first", False)
        if len(prompt_ids) > len(context) and prompt_ids[: len(context)] == context:
            return PromptPlan(prompt_ids, "continued", True)
        return PromptPlan(prompt_ids, "rewrite", False, "the prompt does not extend the context")

    def _fresh(
        self, renderer: ChatRenderer, full_text: str, kind: TurnKind, why: str, **fields: Any
    ) -> PromptPlan:
        ids = renderer.encode(full_text)
        context = self.context
        extends = bool(context) and len(ids) > len(context) and ids[: len(context)] == context
        # A changed reply is drift even when its re-rendering still extends the context token for
        # token (a reply cut by max_tokens, then added to): the count is what the harness did, the
        # sub-trajectory follows the tokens.
        if extends and kind != "drift":
            kind = "continued"
        return PromptPlan(ids, kind, extends, why, **fields)

    def _check_room(self) -> None:
        if self.closed:
            raise RecordingFull("this episode has ended; its model turns are recorded")
        if len(self.turns) >= self.max_turns:
            raise RecordingFull(f"this episode has recorded its limit of {self.max_turns} model turns")

    # -- recording --------------------------------------------------------------------------------

    def record(
        self,
        plan: PromptPlan,
        completion_ids: list[int],
        logprobs: list[float],
        version: str | None,
        reply: Reply | None,
        text: str,
        model_ms: float,
    ) -> TurnLog:
        """Append one turn: the plan's new prompt tokens (mask 0), then the completion (mask 1)."""
        if len(plan.ids) + len(completion_ids) > MAX_SUB_TRAJECTORY_TOKENS:
            raise RecordingFull(
                f"this turn would make a sub-trajectory longer than {MAX_SUB_TRAJECTORY_TOKENS} tokens"
            )
        if plan.kind == "drift":
            self.drift += 1
        elif plan.kind == "rewrite":
            self.rewrites += 1
        if not plan.extends:
            self.subs.append(
                SubTrajectory(index=len(self.subs), policy_version=version or self.policy_version or "0")
            )
            self.sub_messages.append(None)
        sub = self.subs[-1]
        prompt_start = len(sub)
        sub.add_context(plan.ids[prompt_start:])
        start = len(sub)
        sub.add_generated(completion_ids, logprobs, version)
        turn = TurnLog(
            sub_index=sub.index,
            prompt_start=prompt_start,
            start=start,
            end=len(sub),
            kind=plan.kind,
            text=text[:TURN_TEXT_CHARS],
            tool_calls=[
                {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}
                for c in (reply.tool_calls if reply else [])
            ],
            finish_reason=reply.finish_reason if reply else "",
            version=version,
            at=datetime.now(UTC).isoformat(),
            model_ms=model_ms,
            tool_results=plan.tool_results,
        )
        self.turns.append(turn)
        if reply is not None and plan.messages is not None:
            conversation = [*plan.messages, reply.message()]
            size = len(json.dumps(conversation, ensure_ascii=False))
            self.sub_messages[-1] = conversation if size <= MAX_MESSAGES_BYTES else None
            self._last = _Last(plan.keys, plan.tools, message_key(_normalized(reply)), completion_ids)
        else:
            self._last = None
        return turn

    def summary(self) -> dict[str, Any]:
        """The episode-level counts (stored in the episode's details as ``model_proxy``)."""
        return {
            "turns": len(self.turns),
            "sub_trajectories": len(self.subs),
            "drift": self.drift,
            "rewrites": self.rewrites,
            "prompt_tokens": sum(t.start - t.prompt_start for t in self.turns),
            "completion_tokens": sum(t.end - t.start for t in self.turns),
        }


def _arguments(raw: Any) -> Any:
    """A tool call's arguments as the object the model wrote (the wire carries JSON text)."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _normalized(reply: Reply) -> dict[str, Any]:
    return normalize_messages([reply.message()])[0]
