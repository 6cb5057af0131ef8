"""One tool call and its one answer, in the two forms they travel in.

:class:`ToolCall` and :class:`ToolAnswer` are plain frozen dataclasses: the guard reads a call and
returns (for a decoy) an answer on its hot path, where a validating model would only cost time. The
HTTP body of a call, :data:`CallRequest`, is a pydantic union discriminated by ``tool`` whose argument
models validate sizes and characters; :meth:`ToolCallBody.to_call` turns a validated body into the
guard's :class:`ToolCall`. The answer has one shape, real or decoy, and is also the HTTP response.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contract.tools import (
    BashArgs,
    EditFileArgs,
    ListDirArgs,
    ReadFileArgs,
    SubmitArgs,
    ToolName,
    WriteFileArgs,
)


@dataclass(frozen=True)
class ToolCall:
    """One call as the agent made it: a tool name and its (validated) arguments."""

    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolAnswer:
    """The one answer shape the agent sees, real or decoy (DESIGN.md "Tools the agent sees")."""

    output: str
    exit_code: int
    truncated: bool = False


class ToolCallBody(BaseModel):
    """``POST /v1/episodes/{id}/calls``: ``{"tool": ..., "arguments": {...}}``."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("arguments", mode="before", check_fields=False)
    @classmethod
    def _arguments_as_json_text(cls, value: Any) -> Any:
        """Accept OpenAI's ``function.arguments`` as is: a JSON object serialised to a string."""
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except ValueError as exc:
                raise ValueError(f"arguments is a string but not JSON: {exc}") from None
            except RecursionError:
                raise ValueError("arguments is a string nested too deeply to be tool arguments") from None
        return value

    def to_call(self) -> ToolCall:
        """The guard's form: the tool's name and the arguments the agent gave (defaults left out)."""
        arguments: BaseModel = self.arguments  # type: ignore[attr-defined]
        return ToolCall(str(self.tool), arguments.model_dump(exclude_none=True))  # type: ignore[attr-defined]


class BashCall(ToolCallBody):
    tool: Literal[ToolName.BASH]
    arguments: BashArgs


class ReadFileCall(ToolCallBody):
    tool: Literal[ToolName.READ_FILE]
    arguments: ReadFileArgs


class WriteFileCall(ToolCallBody):
    tool: Literal[ToolName.WRITE_FILE]
    arguments: WriteFileArgs


class EditFileCall(ToolCallBody):
    tool: Literal[ToolName.EDIT_FILE]
    arguments: EditFileArgs


class ListDirCall(ToolCallBody):
    tool: Literal[ToolName.LIST_DIR]
    arguments: ListDirArgs = Field(default_factory=ListDirArgs)


class SubmitCall(ToolCallBody):
    tool: Literal[ToolName.SUBMIT]
    arguments: SubmitArgs = Field(default_factory=SubmitArgs)


AnyCall = BashCall | ReadFileCall | WriteFileCall | EditFileCall | ListDirCall | SubmitCall
CallRequest = Annotated[AnyCall, Field(discriminator="tool")]
