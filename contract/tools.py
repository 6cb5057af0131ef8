"""The tools the agent sees: their names, argument models (validated) and OpenAI schemas.

The argument models are the single source: ``GET /v1/tools`` serves schemas derived from them and
the call endpoint validates with them, so the advertised and the enforced contract cannot drift.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ToolName(StrEnum):
    """The six tools; a ``StrEnum`` so a name compares equal to its wire string."""

    BASH = "bash"
    READ_FILE = "read_file"
    WRITE_FILE = "write_file"
    EDIT_FILE = "edit_file"
    LIST_DIR = "list_dir"
    SUBMIT = "submit"


MAX_COMMAND_CHARS = 64 * 1024
MAX_PATH_CHARS = 4096
MAX_CONTENT_CHARS = 768 * 1024
MAX_TIMEOUT_S = 600.0


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


Path = Annotated[
    str, Field(min_length=1, max_length=MAX_PATH_CHARS, description="Path, relative to /workspace")
]


class BashArgs(_Args):
    command: str = Field(min_length=1, max_length=MAX_COMMAND_CHARS, description="Bash command to run")
    timeout: float | None = Field(
        None, gt=0, le=MAX_TIMEOUT_S, description="Seconds before the command is killed (default 60)"
    )

    _check_command = field_validator("command")(_no_nul)


class ReadFileArgs(_Args):
    path: Path

    _check_path = field_validator("path")(_no_nul)


class WriteFileArgs(_Args):
    path: Path
    content: str = Field(max_length=MAX_CONTENT_CHARS, description="The whole new content of the file")

    _check_path = field_validator("path")(_no_nul)


class EditFileArgs(_Args):
    path: Path
    old_str: str = Field(
        min_length=1, max_length=MAX_CONTENT_CHARS, description="Exact text to replace; must occur once"
    )
    new_str: str = Field(max_length=MAX_CONTENT_CHARS, description="Replacement text")

    _check_path = field_validator("path")(_no_nul)


class ListDirArgs(_Args):
    path: str = Field(
        ".", min_length=1, max_length=MAX_PATH_CHARS, description="Directory, relative to /workspace"
    )

    _check_path = field_validator("path")(_no_nul)


class SubmitArgs(_Args):
    pass


ARGUMENT_MODELS: dict[ToolName, type[_Args]] = {
    ToolName.BASH: BashArgs,
    ToolName.READ_FILE: ReadFileArgs,
    ToolName.WRITE_FILE: WriteFileArgs,
    ToolName.EDIT_FILE: EditFileArgs,
    ToolName.LIST_DIR: ListDirArgs,
    ToolName.SUBMIT: SubmitArgs,
}

DESCRIPTIONS: dict[ToolName, str] = {
    ToolName.BASH: "Run a bash command in /workspace and return its combined stdout and stderr.",
    ToolName.READ_FILE: "Read a text file.",
    ToolName.WRITE_FILE: "Create or overwrite a file with the given content.",
    ToolName.EDIT_FILE: "Replace one exact occurrence of old_str with new_str in a file.",
    ToolName.LIST_DIR: "List the entries of a directory.",
    ToolName.SUBMIT: "Submit the work in /workspace for grading; call it once when done.",
}


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's titles: OpenAI tool schemas are plain JSON Schema objects."""
    schema = {k: v for k, v in schema.items() if k != "title"}
    schema["properties"] = {
        name: {k: v for k, v in prop.items() if k != "title"}
        for name, prop in schema.get("properties", {}).items()
    }
    for prop in schema["properties"].values():
        if "anyOf" in prop:  # Optional[float] -> plain number; "not given" is how the agent says null
            prop.update(next(s for s in prop.pop("anyOf") if s.get("type") != "null"))
            prop.pop("default", None)
    return schema


def openai_tools() -> list[dict[str, Any]]:
    """The tools as OpenAI function-calling schemas (``tools=`` of a chat completion request)."""
    return [
        {
            "type": "function",
            "function": {
                "name": str(name),
                "description": DESCRIPTIONS[name],
                "parameters": _clean_schema(model.model_json_schema()),
            },
        }
        for name, model in ARGUMENT_MODELS.items()
    ]
