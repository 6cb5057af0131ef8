"""What a rule file may say, validated before anything is compiled (``guard.rules`` loads it).

A rule file is ``rules: [ {id, category, description, action, match: {...}} ]``. Every key of
``match`` that is present must hold (AND):

- ``tool``: tool names; ``program``: program names (after normalisation), with ``arg`` /
  ``arg_not`` (a regex some single argument matches / that this argument must not match),
  ``args`` / ``args_not`` (regex over the arguments joined by spaces) and ``source`` (regex over
  where the command was found: ``bash``, ``bash -c``, ``python subprocess``, ...);
- ``paths``: globs (``**`` crosses directories) over the absolute paths the call touches, or
  ``"@protected"`` for the protected-path set; ``path_not``: a regex such a path must not match;
- ``fact`` / ``fact_not``: regex over call-level facts (``write:…``, ``delete:…``, ``dynamic_program:…``);
- ``code``: a block of code with ``lang``, ``origin`` (run|write), ``path`` globs (``path_not``), ``fact`` /
  ``fact_not`` (regex over facts read from the code, e.g. its AST), ``text`` / ``text_not`` (regex
  its text must / must not match).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from guard.errors import GuardError


class RuleFileError(GuardError):
    """A rule file that cannot be loaded: named with its path and the reason."""


class CodeSpec(BaseModel):
    """``match.code``: a code block the call runs or writes."""

    model_config = ConfigDict(extra="forbid")

    lang: list[str] | None = None
    origin: list[Literal["run", "write"]] | None = None
    path: list[str] | None = None
    path_not: str | None = None
    fact: str | None = None
    fact_not: str | None = None
    text: str | None = None
    text_not: str | None = None


class MatchSpec(BaseModel):
    """``match``: every condition present must hold."""

    model_config = ConfigDict(extra="forbid")

    tool: list[str] | None = None
    program: list[str] | None = None
    source: str | None = None
    arg: str | None = None
    arg_not: str | None = None
    args: str | None = None
    args_not: str | None = None
    paths: list[str] | None = None
    path_not: str | None = None
    fact: str | None = None
    fact_not: str | None = None
    code: CodeSpec | None = None


class RuleSpec(BaseModel):
    """One entry of a rule file's ``rules`` list."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    category: str = Field(min_length=1)
    description: str = ""
    action: Literal["decoy", "escalate", "flag"]
    match: MatchSpec

    @field_validator("match")
    @classmethod
    def _not_empty(cls, value: MatchSpec) -> MatchSpec:
        if not value.model_dump(exclude_none=True):
            raise ValueError("match must hold at least one condition")
        return value
