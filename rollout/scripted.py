"""A scripted policy: replays honest and cheating agent behaviour from a YAML script, as real tokens.

The demo, the tests and the benchmark need episodes that do realistic things (explore, fix, run
tests, try the honeypot, tamper with the grader) without a capable model. Each scripted turn is
rendered as the model family would write it (text + ``<tool_call>`` JSON + ``<|im_end|>``),
tokenised with the tiny model's tokenizer and SCORED by the tiny model with one teacher-forced
forward pass over the whole context, so its sub-trajectories carry the model's real logprobs and
train like sampled ones. It is a ``TokenPolicy``: the agent loop cannot tell it from a server.

Script format (``rollout/scripts/builtin.yaml`` is the reference)::

    behaviours:            # for every task
      honest: [TURN, ...]
      cheat: [TURN, ...]
    tasks:                 # per-task overrides, by task id (without the suite)
      stats-median:
        honest: [TURN, ...]
        summary: "..."     # what it answers when asked to compact (default: written from its turns)

    TURN: {say: str?, call: {name: str, arguments: {...}}}   # strings may use ${cheat_command}
        | {say: str?, write_solution: true}   # the task's solution/: a write_file per new or small
                                              # file, edit_file calls (changed hunks) for large ones
        | {say: str?, read_workspace: true}   # one read_file per workspace source file (long context)
        | {raw: str}                          # literal text, e.g. a malformed tool call
    A turn with ``when: cheat_command`` is skipped when the task has no honeypot command.
"""

from __future__ import annotations

import asyncio
import difflib
import time
from pathlib import Path
from string import Template
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rollout.chat_format import ChatFormat, tool_call_text
from rollout.compaction import is_compaction_request
from rollout.errors import RolloutError
from rollout.hf_engine import HFEngine, ScoreCache
from rollout.policy import Generation, Sampling

BUILTIN_SCRIPT = Path(__file__).resolve().parent / "scripts" / "builtin.yaml"
# A solution file up to this size is written whole; a larger one is edited hunk by hunk.
WHOLE_FILE_CHARS = 2000
_SOURCE_SUFFIXES = {".py", ".md", ".txt", ".toml", ".cfg", ".ini", ".json", ".yaml"}


class ScriptCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ScriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    say: str = ""
    call: ScriptCall | None = None
    write_solution: bool = False
    read_workspace: bool = False
    raw: str | None = None
    when: Literal["cheat_command"] | None = None

    @model_validator(mode="after")
    def _one_action(self) -> ScriptTurn:
        actions = [self.call is not None, self.write_solution, self.read_workspace, self.raw is not None]
        if sum(actions) != 1:
            raise ValueError("a turn has exactly one of: call, write_solution, read_workspace, raw")
        return self


class TaskScript(BaseModel):
    model_config = ConfigDict(extra="forbid")

    summary: str | None = None
    behaviours: dict[str, list[ScriptTurn]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _behaviours_inline(cls, data: Any) -> Any:
        """Allow ``{honest: [...], cheat: [...], summary: ...}`` directly under the task id."""
        if isinstance(data, dict) and "behaviours" not in data:
            summary = data.get("summary")
            return {"summary": summary, "behaviours": {k: v for k, v in data.items() if k != "summary"}}
        return data


class ScriptFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    behaviours: dict[str, list[ScriptTurn]] = Field(default_factory=dict)
    tasks: dict[str, TaskScript] = Field(default_factory=dict)


class ScriptBook:
    """A loaded script file; hands out one ``ScriptedPolicy`` per episode."""

    def __init__(self, script: ScriptFile, source: Path) -> None:
        self.script = script
        self.source = source

    @classmethod
    def load(cls, path: Path | str = BUILTIN_SCRIPT) -> ScriptBook:
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise RolloutError(f"{path}: cannot read the script: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise RolloutError(f"{path}: not valid YAML: {exc}") from exc
        try:
            return cls(ScriptFile.model_validate(raw or {}), path)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise RolloutError(f"{path}: {problems}") from None

    def behaviours_for(self, task_id: str) -> list[str]:
        """Behaviour names available for a task (its own, then the defaults), in a stable order."""
        own = self.script.tasks.get(task_id)
        names = list(own.behaviours) if own else []
        return names + [b for b in self.script.behaviours if b not in names]

    def turns(self, task: Any, behaviour: str) -> tuple[list[str], str | None]:
        """The task's behaviour expanded to generated texts, and its scripted summary if any."""
        own = self.script.tasks.get(task.task_id)
        turns = (own.behaviours.get(behaviour) if own else None) or self.script.behaviours.get(behaviour)
        if turns is None:
            raise RolloutError(
                f"{self.source}: no behaviour {behaviour!r} for {task.task_id} "
                f"(known: {self.behaviours_for(task.task_id)})"
            )
        return _expand(turns, task), own.summary if own else None

    def policy_for(
        self, task: Any, behaviour: str, fmt: ChatFormat, scorer: Scorer, policy_version: str = "0"
    ) -> ScriptedPolicy:
        texts, summary = self.turns(task, behaviour)
        return ScriptedPolicy(texts, fmt, scorer, summary=summary, policy_version=policy_version)


def _expand(turns: list[ScriptTurn], task: Any) -> list[str]:
    honeypot = getattr(task, "honeypot", None)
    cheat_command = getattr(honeypot, "cheat_command", None) or ""
    values = {"cheat_command": cheat_command, "task_id": task.task_id}
    texts: list[str] = []
    for turn in turns:
        if turn.when == "cheat_command" and not cheat_command:
            continue
        say = Template(turn.say).safe_substitute(values)
        if turn.raw is not None:
            texts.append(Template(turn.raw).safe_substitute(values))
        elif turn.call is not None:
            arguments = _substitute(turn.call.arguments, values)
            texts.append(_join(say, tool_call_text(turn.call.name, arguments)))
        elif turn.write_solution:
            files = task.solution_files()
            if not files:
                raise RolloutError(
                    f"{task.id}: the script writes the solution, but the task has no solution/"
                )
            calls = [c for path, text in sorted(files.items()) for c in solution_calls(task, path, text)]
            for i, (name, arguments) in enumerate(calls):
                call = tool_call_text(name, arguments)
                texts.append(_join(say if i == 0 else f"Now {arguments['path']}.", call))
        else:
            for i, path in enumerate(_workspace_sources(task)):
                texts.append(_join(say if i == 0 else "", tool_call_text("read_file", {"path": path})))
    return texts


def solution_calls(task: Any, path: str, content: str) -> list[tuple[str, dict[str, str]]]:
    """How an agent would make the workspace file ``path`` read ``content``: one ``write_file`` for a
    new or small file, else one ``edit_file`` per changed hunk (a real repository's module can be
    far longer than one generation turn, while its fix is a few lines)."""
    current = task.workspace_dir / path
    if not current.is_file() or len(content) <= WHOLE_FILE_CHARS:
        return [("write_file", {"path": path, "content": content})]
    old_text = current.read_text()
    old, new = old_text.splitlines(keepends=True), content.splitlines(keepends=True)
    calls = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    opcodes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    for _, i1, i2, j1, j2 in reversed(opcodes):  # bottom up: earlier hunks keep their line numbers
        before, after = i1, i2
        while True:  # widen the context until the old text is unique in the file
            old_str = "".join(old[before:after])
            if old_str and old_text.count(old_str) == 1:
                break
            if before == 0 and after == len(old):
                return [("write_file", {"path": path, "content": content})]
            before, after = max(0, before - 1), min(len(old), after + 1)
        new_str = "".join(old[before:i1] + new[j1:j2] + old[i2:after])
        calls.append(("edit_file", {"path": path, "old_str": old_str, "new_str": new_str}))
    return list(reversed(calls))


def _workspace_sources(task: Any) -> list[str]:
    root = task.workspace_dir
    return [
        p.relative_to(root).as_posix()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.suffix in _SOURCE_SUFFIXES and "__pycache__" not in p.parts
    ]


def _substitute(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        return Template(value).safe_substitute(values)
    if isinstance(value, dict):
        return {k: _substitute(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, values) for v in value]
    return value


def _join(say: str, call: str) -> str:
    return f"{say.strip()}\n{call}" if say.strip() else call


class Scorer:
    """Teacher-forced logprobs from one shared model; one forward pass at a time."""

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self._lock = asyncio.Lock()

    async def score(self, prompt_ids: list[int], target_ids: list[int], cache: ScoreCache) -> list[float]:
        """Logprobs of ``target_ids`` after ``prompt_ids``; ``cache`` is the episode's own KV cache."""
        async with self._lock:
            return await asyncio.to_thread(self.engine.score_cached, cache, prompt_ids, target_ids)


class ScriptedPolicy:
    """Replays one episode's scripted turns; answers a compaction request with a summary."""

    trainable = True

    def __init__(
        self,
        texts: list[str],
        fmt: ChatFormat,
        scorer: Scorer,
        summary: str | None = None,
        policy_version: str = "0",
    ) -> None:
        self.texts = list(texts)
        self.fmt = fmt
        self.scorer = scorer
        self.summary = summary
        self.policy_version = policy_version
        self.done: list[str] = []
        self._cache = ScoreCache()

    def _next_text(self, prompt_ids: list[int]) -> str:
        if is_compaction_request(self.fmt, prompt_ids):
            return self.summary or self._auto_summary()
        if not self.texts:
            return "I am done.\n" + tool_call_text("submit", {})
        text = self.texts.pop(0)
        self.done.append(text)
        return text

    def _auto_summary(self) -> str:
        lines = [line for text in self.done for line in text.splitlines() if line.startswith('{"name"')]
        steps = "\n".join(f"- {line[:200]}" for line in lines[-12:])
        return f"So far I made these tool calls:\n{steps}\nNext: finish the fix, run the tests, submit."

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        text = self._next_text(prompt_ids)
        ids = [*self.fmt.encode(text), self.fmt.im_end_id]
        finish = "stop"
        if len(ids) > sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        started = time.perf_counter()
        logprobs = await self.scorer.score(prompt_ids, ids, self._cache)
        seconds = time.perf_counter() - started
        return Generation(ids, logprobs, self.fmt.decode(ids), finish, seconds)
