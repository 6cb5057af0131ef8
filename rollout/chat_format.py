"""The Qwen/Hermes chat format as token pieces, and the parser for ``<tool_call>`` JSON.

Token in, token out: the runner renders the first prompt once with the tokenizer's chat template and
from then on only APPENDS pieces it tokenises on their own (tool answers, the next generation
prompt). Re-tokenising a whole conversation from text can merge or split tokens differently from what
the policy actually produced, and the trainer would then learn on tokens the policy never saw.
The pieces below are exactly what the Qwen2.5 template renders for the same messages (a test checks
this), so a conversation built by appending equals the template's rendering, text-wise.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ParsedCall:
    """A well-formed tool call taken from generated text."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParseError:
    """A malformed tool call: ``message`` is what the model is shown as the tool response."""

    message: str


def parse_tool_calls(text: str) -> list[ParsedCall | ParseError]:
    """Every ``<tool_call>`` block in ``text``, in order; malformed ones become ``ParseError``.

    A ``<tool_call>`` with no closing tag (generation cut by max_tokens) is an error too, so the model
    learns that truncated calls do nothing.
    """
    results: list[ParsedCall | ParseError] = []
    for match in _TOOL_CALL_RE.finditer(text):
        results.append(_parse_one(match.group(1).strip()))
    tail = text[text.rfind("</tool_call>") + len("</tool_call>") :] if "</tool_call>" in text else text
    if "<tool_call>" in tail:
        results.append(ParseError("Error: the tool call is not closed with </tool_call>; it was not run."))
    return results


def _parse_one(body: str) -> ParsedCall | ParseError:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        return ParseError(f"Error: the tool call is not valid JSON ({exc.msg} at char {exc.pos}); not run.")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return ParseError('Error: a tool call must be a JSON object {"name": str, "arguments": object}.')
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):  # some models emit the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return ParseError("Error: the tool call's arguments are a string that is not valid JSON.")
    if not isinstance(arguments, dict):
        return ParseError("Error: the tool call's arguments must be a JSON object.")
    return ParsedCall(name=data["name"], arguments=arguments)


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """A tool call exactly as the template renders it inside an assistant turn."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


class ChatFormat:
    """Token pieces of the Qwen chat format for one tokenizer (ids are cached where constant)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.im_end_id: int = tokenizer.convert_tokens_to_ids(IM_END)
        self.generation_prompt_ids = self.encode(f"{IM_START}assistant\n")
        self.stop_token_ids = [self.im_end_id]
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id != self.im_end_id:
            self.stop_token_ids.append(tokenizer.eos_token_id)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def prompt_ids(self, system: str, user: str, tools: list[dict[str, Any]]) -> list[int]:
        """System (with the tool schemas) + the task as the first user turn, WITHOUT generation prompt."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=False, tokenize=False
        )
        return self.encode(text)

    def close_turn_ids(self, generated: list[int]) -> list[int]:
        """What ends an assistant turn: ``<|im_end|>`` if the policy did not emit it, then a newline."""
        if generated and generated[-1] in self.stop_token_ids:
            return self.encode("\n")
        return self.encode(f"{IM_END}\n")

    def tool_responses_ids(self, outputs: list[str]) -> list[int]:
        """One user turn holding a ``<tool_response>`` block per tool answer (Qwen's rendering)."""
        body = "".join(f"\n<tool_response>\n{out}\n</tool_response>" for out in outputs)
        return self.encode(f"{IM_START}user{body}{IM_END}\n")

    def user_turn_ids(self, text: str) -> list[int]:
        return self.encode(f"{IM_START}user\n{text}{IM_END}\n")

    def assistant_text(self, generated: list[int]) -> str:
        """The generated text without the closing ``<|im_end|>`` (for parsing and storage)."""
        ids = generated[:-1] if generated and generated[-1] in self.stop_token_ids else generated
        return self.decode(ids)
