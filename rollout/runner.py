"""Many episodes at once: bounded asyncio concurrency over one gateway client and one policy.

``RolloutSpec`` is everything a process needs to run episodes (plain data, so Ray can ship it to
workers); ``RolloutContext`` is what it builds from it (tokenizer, tasks, gateway client, policy);
``run_episodes`` runs a list of ``EpisodeSpec`` with at most ``concurrency`` in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rollout.agent import AgentConfig, EpisodeResult, run_episode
from rollout.chat_format import ChatFormat
from rollout.gateway_client import GatewayClient, GatewayError
from rollout.policy import ChatCompletionsPolicy, CompletionsPolicy, PolicyError
from rollout.scripted import BUILTIN_SCRIPT, Scorer, ScriptBook
from tasks.spec import TaskRegistry


@dataclass(frozen=True)
class EpisodeSpec:
    task_id: str  # "<suite>/<task_id>"
    behaviour: str | None = None  # scripted policy only


@dataclass(frozen=True)
class RolloutSpec:
    """How to reach the gateway and the policy; plain data (Ray pickles it to workers)."""

    gateway_url: str
    admin_token: str
    model: str  # tokenizer (and scorer for the scripted policy): a HF model directory
    suites: tuple[str, ...] = ("builtin",)
    policy: Literal["completions", "chat", "scripted"] = "completions"
    policy_url: str | None = None
    served_model_name: str = "default"
    script: str | None = None
    policy_version: str = "0"
    api_key: str | None = None
    config: AgentConfig = field(default_factory=AgentConfig)
    #: Run a task again, as a new episode, when the gateway ended it as ``infra_error`` (its engine
    #: or gateway failed under it); that many times at most. The failed episode stays recorded.
    infra_retries: int = 0


class RolloutContext:
    """The live objects behind a ``RolloutSpec`` (one per process)."""

    def __init__(self, spec: RolloutSpec, version_source: Callable[[], str] | None = None) -> None:
        """``version_source``: the version the policy server serves now, when the caller pushes the
        weights and knows it (the asynchronous loop); new episodes and unlabelled spans record it."""
        from transformers import AutoTokenizer

        self.spec = spec
        model_dir = Path(spec.model)
        self.fmt = ChatFormat(AutoTokenizer.from_pretrained(model_dir))
        self.tasks = TaskRegistry(list(spec.suites))
        self.gateway = GatewayClient(spec.gateway_url, spec.admin_token)
        self._shared: Any = None
        self._book: Any = None
        self._scorer: Any = None
        if spec.policy == "scripted":
            from rollout.hf_engine import HFEngine

            self._book = ScriptBook.load(spec.script or BUILTIN_SCRIPT)
            self._scorer = Scorer(HFEngine(model_dir))
        elif spec.policy_url is None:
            raise ValueError("a completions or chat policy needs a policy_url")
        elif spec.policy == "completions":
            self._shared = CompletionsPolicy(
                spec.policy_url,
                spec.served_model_name,
                spec.policy_version,
                spec.api_key,
                version_source=version_source,
            )
        else:
            self._shared = ChatCompletionsPolicy(
                spec.policy_url, spec.served_model_name, spec.policy_version, spec.api_key
            )

    def policy_for(self, episode: EpisodeSpec) -> Any:
        if self._book is None:
            return self._shared
        task = self.tasks.get(episode.task_id)
        behaviour = episode.behaviour or self._book.behaviours_for(task.task_id)[0]
        return self._book.policy_for(task, behaviour, self.fmt, self._scorer, self.spec.policy_version)

    def episode_specs(
        self, episodes_per_task: int, task_filter: list[str] | None = None
    ) -> list[EpisodeSpec]:
        """``episodes_per_task`` episodes of every task; scripted ones cycle through the behaviours."""
        specs = []
        for task in self.tasks.list():
            if task_filter and task.id not in task_filter and task.task_id not in task_filter:
                continue
            behaviours = self._book.behaviours_for(task.task_id) if self._book else [None]
            for i in range(episodes_per_task):
                specs.append(EpisodeSpec(task.id, behaviours[i % len(behaviours)]))
        return specs

    async def aclose(self) -> None:
        await self.gateway.aclose()
        if self._shared is not None:
            await self._shared.aclose()


async def run_one(ctx: RolloutContext, episode: EpisodeSpec) -> EpisodeResult:
    """One episode of the task; run again as a new episode (up to ``infra_retries`` times) when the
    gateway ended it as ``infra_error``. ``details["infra_errors"]`` lists the episodes given up."""
    task = ctx.tasks.get(episode.task_id)
    given_up: list[str] = []
    retries = ctx.spec.infra_retries
    for attempt in range(retries + 1):
        try:
            result = await run_episode(
                ctx.gateway, ctx.policy_for(episode), ctx.fmt, task.id, task.instructions, ctx.spec.config
            )
        except (GatewayError, PolicyError) as exc:  # the episode could not even start
            result = EpisodeResult(task=task.id, status="error", error=str(exc))
        if result.status != "infra_error" or attempt == retries:
            break
        given_up.append(result.episode_id or "?")
    if given_up:
        result.details["infra_errors"] = given_up
    return result


async def count_intercepts(gateway: GatewayClient, result: EpisodeResult) -> int:
    """Intercepted (decoyed or flagged) calls of an episode: the runner cannot see decoys, the gateway can."""
    if result.episode_id is None:
        return 0
    view = await gateway.episode(result.episode_id)
    return sum(1 for call in view.get("tool_calls", []) if call.get("action") != "allow")


async def run_episodes(
    ctx: RolloutContext,
    episodes: list[EpisodeSpec],
    concurrency: int,
    on_done: Callable[[EpisodeResult, int], None] | None = None,
    with_intercepts: bool = True,
) -> list[EpisodeResult]:
    """Run ``episodes`` with at most ``concurrency`` at once; ``on_done(result, intercepts)`` each."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(episode: EpisodeSpec) -> EpisodeResult:
        async with semaphore:
            result = await run_one(ctx, episode)
            intercepts = 0
            if with_intercepts:
                try:
                    intercepts = await count_intercepts(ctx.gateway, result)
                except GatewayError:
                    intercepts = 0
            result.details.setdefault("intercepts", intercepts)
            if on_done is not None:
                on_done(result, intercepts)
            return result

    return list(await asyncio.gather(*(one(e) for e in episodes)))


@dataclass
class RunSummary:
    episodes: int = 0
    submitted: int = 0
    errors: int = 0
    reward_sum: float = 0.0
    rewarded: int = 0
    intercepts: int = 0
    tool_calls: int = 0
    sub_trajectories: int = 0
    compactions: int = 0
    overhead_ms: list[float] = field(default_factory=list)

    def add(self, result: EpisodeResult, intercepts: int) -> None:
        self.episodes += 1
        self.submitted += result.status == "submitted"
        self.errors += result.status in ("error", "infra_error")
        if result.reward is not None:
            self.reward_sum += result.reward
            self.rewarded += 1
        self.intercepts += intercepts
        self.tool_calls += result.tool_calls
        self.sub_trajectories += len([t for t in result.sub_trajectories if t.token_ids])
        self.compactions += result.compactions
        self.overhead_ms.extend(result.overhead_ms)

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.rewarded if self.rewarded else 0.0


class RichProgress:
    """A rich progress bar: episodes done, mean reward, intercepts."""

    def __init__(self, total: int, description: str = "episodes") -> None:

        self.summary = RunSummary()
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("reward {task.fields[reward]:.3f}"),
            TextColumn("intercepts {task.fields[intercepts]}"),
            TextColumn("errors {task.fields[errors]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),  # stdout stays clean for --json
        )
        self.task = self.progress.add_task(description, total=total, reward=0.0, intercepts=0, errors=0)

    def __enter__(self) -> RichProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def __call__(self, result: EpisodeResult, intercepts: int) -> None:
        self.summary.add(result, intercepts)
        s = self.summary
        self.progress.update(
            self.task, advance=1, reward=s.mean_reward, intercepts=s.intercepts, errors=s.errors
        )
