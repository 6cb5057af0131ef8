"""The policy's chat template as the model proxy uses it: messages to text to token ids, and a
generated turn back to an OpenAI message.

Why the proxy renders at all: the policy server is asked for token ids in and token ids out
(``/v1/completions`` with a token-id prompt), so the exact tokens the model conditioned on are the
ones the proxy sent, never a re-tokenisation. The template is used for what the harness adds
(tool results, user turns, the generation prompt); the model's own earlier turns are spliced in as
the ids it sampled (:mod:`gateway.services.recording`).

Tool calls are read in the Hermes/Qwen ``<tool_call>{json}</tool_call>`` format (vLLM's ``hermes``
parser, SGLang's ``qwen25``, the built-in server), the format of the models rlguard serves.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from rollout.chat_format import ParsedCall, parse_tool_calls

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
PROBE = "\ue000rlguard-probe\ue000"
MessageKey = tuple[str, str, tuple[tuple[str, str], ...], str]


class RenderError(ValueError):
    """The harness's messages cannot be rendered by the policy's chat template (a 400)."""


def content_text(content: Any) -> str:
    """OpenAI content as text: a string, or the text parts of a content-part list joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RenderError(f"content parts of type {kind!r} are not supported (text only)")
        return "".join(parts)
    raise RenderError(f"message content must be a string or a list of parts, not {type(content).__name__}")


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RenderError(f"tool call arguments are not JSON: {exc.msg}") from None
        if isinstance(value, dict):
            return value
    raise RenderError("tool call arguments must be a JSON object")


def normalize_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """The harness's messages in the one shape templates render: text content, ``developer`` read as
    ``system``, tool-call arguments as objects (vLLM does the same before rendering)."""
    out: list[dict[str, Any]] = []
    for number, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RenderError(f"messages[{number}] is not an object")
        role = message.get("role")
        if role not in ROLES:
            raise RenderError(f"messages[{number}].role {role!r} is not one of {sorted(ROLES)}")
        normalized: dict[str, Any] = {
            "role": "system" if role == "developer" else role,
            "content": content_text(message.get("content")),
        }
        calls = message.get("tool_calls") or []
        if role == "assistant" and calls:
            normalized["tool_calls"] = []
            for call in calls:
                function = (call or {}).get("function") or {}
                normalized["tool_calls"].append(
                    {
                        "id": str(call.get("id") or ""),
                        "type": "function",
                        "function": {
                            "name": str(function.get("name") or ""),
                            "arguments": _arguments(function.get("arguments")),
                        },
                    }
                )
        if role == "tool":
            normalized["tool_call_id"] = str(message.get("tool_call_id") or "")
            if message.get("name"):
                normalized["name"] = str(message["name"])
        out.append(normalized)
    return out


def message_key(message: dict[str, Any]) -> MessageKey:
    """What makes two normalised messages the same turn: role, text, tool calls (name and arguments;
    call ids are the harness's bookkeeping and templates do not render them)."""
    calls = tuple(
        (c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True))
        for c in message.get("tool_calls", [])
    )
    return (message["role"], message["content"], calls, message.get("tool_call_id", ""))


def tools_key(tools: list[dict[str, Any]] | None) -> str:
    return json.dumps(tools or [], sort_keys=True)


@dataclass(frozen=True)
class Reply:
    """A generated turn as the harness receives it."""

    content: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


class ChatRenderer:
    """One tokenizer and its chat template; thread-safe for reading (the proxy renders off the loop)."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        self.tokenizer = tokenizer
        self.name = name
        if not getattr(tokenizer, "chat_template", None):
            raise RenderError(f"the tokenizer at {name} has no chat template")
        self.turn_suffix = self._assistant_suffix()
        self.stop_token_ids = self._stop_token_ids()

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, generation: bool
    ) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                messages, tools=tools or None, add_generation_prompt=generation, tokenize=False
            )
        except Exception as exc:  # a template error is the harness's malformed message list
            raise RenderError(f"the chat template cannot render these messages: {exc}") from None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def text(self, completion_ids: list[int], stop: list[str] | None = None) -> str:
        """What the harness reads of a completion: without the stop token, cut at a stop string."""
        ids = completion_ids
        if ids and ids[-1] in self.stop_token_ids:
            ids = ids[:-1]
        text = self.decode(ids)
        cuts = [text.find(s) for s in stop or [] if s and s in text]
        return text[: min(cuts)] if cuts else text

    def _assistant_suffix(self) -> str:
        """What the template writes after an assistant turn's text (Qwen: ``<|im_end|>\\n``)."""
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": PROBE}]
        text = self.render(messages, None, generation=False)
        if PROBE not in text:
            raise RenderError(f"the chat template of {self.name} does not render assistant turns")
        return text.split(PROBE, 1)[1]

    def _stop_token_ids(self) -> list[int]:
        """End of an assistant turn: the template's closing token (when it is one token) and EOS."""
        ids: list[int] = []
        closing = self.encode(self.turn_suffix.rstrip("\n"))
        if len(closing) == 1:
            ids.append(closing[0])
        eos = self.tokenizer.eos_token_id
        for token in [eos] if isinstance(eos, int) else list(eos or []):
            if token not in ids:
                ids.append(token)
        return ids

    def close_turn(self, completion_ids: list[int]) -> list[int]:
        """The ids that end a generated turn the way the template ends it: the suffix, less the stop
        token the model already generated."""
        suffix = self.turn_suffix
        if completion_ids and completion_ids[-1] in self.stop_token_ids:
            generated = self.decode(completion_ids[-1:])
            if suffix.startswith(generated):
                suffix = suffix[len(generated) :]
        return self.encode(suffix) if suffix else []

    def reply(
        self, completion_ids: list[int], finish_reason: str, parse_tools: bool, stop: list[str] | None = None
    ) -> Reply:
        """The generated ids as an OpenAI assistant message (Hermes ``<tool_call>`` blocks become
        ``tool_calls``; a malformed block leaves the whole text as content, as vLLM's parser does).
        Text from a stop string on is left out, as OpenAI servers do; the recorded ids keep it."""
        text = self.text(completion_ids, stop)
        if not parse_tools or "<tool_call>" not in text:
            return Reply(text, [], finish_reason)
        parsed = parse_tool_calls(text)
        if not parsed or not all(isinstance(p, ParsedCall) for p in parsed):
            return Reply(text, [], finish_reason)
        calls = [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": p.name, "arguments": json.dumps(p.arguments, ensure_ascii=False)},
            }
            for p in parsed
            if isinstance(p, ParsedCall)
        ]
        content = text.split("<tool_call>", 1)[0].rstrip()
        return Reply(content, calls, "tool_calls")
