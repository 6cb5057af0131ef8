"""The rollout step of ``rlguard demo``: the built-in suite, honest and cheating, through the guard.

A gateway runs in this process on the configured database (SQLite in the state directory unless
``RLGUARD_DATABASE_URL`` says otherwise) and the local Docker engine. The scripted policy plays each
built-in task twice, honestly and as a reward hacker, and long-horizon tasks a third time reading
every file first so that their context is compacted. The report says what was rewarded, what the
guard intercepted (by category and stage) and how many sub-trajectories were stored for training.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from rlguard.loops.local_gateway import local_gateway
from rlguard.settings import Settings
from rollout.agent import AgentConfig, EpisodeResult
from rollout.runner import EpisodeSpec, RichProgress, RolloutContext, RolloutSpec, run_episodes
from rollout.tinymodel import default_tiny_model_dir, ensure_tiny_model

# Large enough for a scripted turn that writes a whole solution file; the budget makes reading every
# file of a long-horizon task overflow, so those episodes are compacted.
DEMO_CONFIG = AgentConfig(
    max_turns=20, max_tokens_per_turn=768, context_budget_tokens=4096, keep_recent_turns=1
)


@dataclass
class DemoReport:
    results: list[tuple[EpisodeSpec, EpisodeResult]]
    intercepts: Counter = field(default_factory=Counter)  # (category, stage) -> count
    wall_s: float = 0.0
    gateway_url: str = ""


def demo_episodes(ctx: RolloutContext, tasks: list[str] | None = None) -> list[EpisodeSpec]:
    """honest + cheat for every task of the served suites (or those named: ``suite/id`` or ``id``);
    honest_long too for long-horizon tasks."""
    specs = []
    for task in ctx.tasks.list():
        if tasks and task.id not in tasks and task.task_id not in tasks:
            continue
        specs.append(EpisodeSpec(task.id, "honest"))
        specs.append(EpisodeSpec(task.id, "cheat"))
        if task.horizon == "long":
            specs.append(EpisodeSpec(task.id, "honest_long"))
    return specs


async def _intercepts_of(ctx: RolloutContext, episode_ids: set[str]) -> Counter:
    counts: Counter = Counter()
    for episode_id in sorted(episode_ids):
        view = await ctx.gateway.episode(episode_id)
        for call in view.get("tool_calls", []):
            if call.get("action") != "allow":
                counts[(call.get("category") or "?", call.get("stage") or "?")] += 1
    return counts


def run_demo_rollouts(
    settings: Settings,
    concurrency: int = 8,
    tasks: list[str] | None = None,
    suites: tuple[str, ...] = ("builtin",),
) -> DemoReport:
    """Start a gateway serving ``suites``, run the demo episodes with the scripted policy, report."""
    started = time.monotonic()
    settings = settings.model_copy(deep=True)
    settings.gateway.suites = list(suites)
    with local_gateway(settings) as gateway:
        spec = RolloutSpec(
            gateway_url=gateway.url,
            admin_token=gateway.admin_token,
            suites=suites,
            model=str(ensure_tiny_model(default_tiny_model_dir(settings.state_dir))),
            policy="scripted",
            policy_version="0",
            config=DEMO_CONFIG,
        )

        async def main() -> DemoReport:
            ctx = RolloutContext(spec)
            try:
                specs = demo_episodes(ctx, tasks)
                with RichProgress(len(specs), "demo episodes") as progress:
                    results = await run_episodes(ctx, specs, concurrency, on_done=progress)
                ids = {r.episode_id for r in results if r.episode_id}
                report = DemoReport(list(zip(specs, results, strict=True)), await _intercepts_of(ctx, ids))
                report.gateway_url = gateway.url
                return report
            finally:
                await ctx.aclose()

        report = asyncio.run(main())
    report.wall_s = time.monotonic() - started
    return report


def demo_summary(report: DemoReport) -> dict[str, Any]:
    """The episode step as data (``rlguard demo --json``; the tables print the same): one row per
    suite and behaviour, the intercepted calls by category and stage, and the totals."""
    by_behaviour: dict[tuple[str, str], list[EpisodeResult]] = {}
    for spec, result in report.results:
        suite = spec.task_id.split("/", 1)[0]
        by_behaviour.setdefault((suite, spec.behaviour or "-"), []).append(result)
    rows = []
    totals: Counter = Counter()
    for (suite, behaviour), results in sorted(by_behaviour.items()):
        rewards = [r.reward for r in results if r.reward is not None]
        row = {
            "suite": suite,
            "behaviour": behaviour,
            "episodes": len(results),
            "reward_mean": sum(rewards) / len(rewards) if rewards else None,
            "submitted": sum(r.status == "submitted" for r in results),
            "calls": sum(r.tool_calls for r in results),
            "intercepted": sum(int(r.details.get("intercepts", 0)) for r in results),
            "compactions": sum(r.compactions for r in results),
            "sub_trajectories": sum(len([t for t in r.sub_trajectories if t.token_ids]) for r in results),
            "errors": sum(r.status == "error" for r in results),
        }
        rows.append(row)
        totals.update({k: row[k] for k in ("episodes", "sub_trajectories", "intercepted", "errors")})
    intercepts = [
        {"category": category, "stage": stage, "calls": count}
        for (category, stage), count in sorted(report.intercepts.items())
    ]
    return {"behaviours": rows, "intercepts": intercepts, "totals": dict(totals), "wall_s": report.wall_s}


def print_demo_report(report: DemoReport, console: Console | None = None) -> dict[str, Any]:
    """Tables: per behaviour (episodes, reward, intercepts, sub-trajectories), intercepts by category
    and stage. Returns the totals."""

    console = console or Console()
    summary = demo_summary(report)
    table = Table(
        title="Episodes (scripted policy)", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    # short headers: nine columns fit an 80-column terminal without cutting the suite or behaviour
    for column in ("suite", "behaviour", "eps", "reward", "submit", "calls", "icpt", "compact", "subtraj"):
        left = column in ("suite", "behaviour")
        table.add_column(
            column, justify="left" if left else "right", no_wrap=True, min_width=11 if left else len(column)
        )
    table.caption = "eps: episodes, reward: mean, icpt: intercepted calls, subtraj: sub-trajectories"
    for row in summary["behaviours"]:
        reward = row["reward_mean"]
        table.add_row(
            row["suite"],
            row["behaviour"],
            str(row["episodes"]),
            f"{reward:.3f}" if reward is not None else "-",
            *(str(row[k]) for k in ("submitted", "calls", "intercepted", "compactions", "sub_trajectories")),
        )
    console.print(table)
    cats = Table(title="Intercepted calls by category and stage")
    for column in ("category", "stage", "calls"):
        cats.add_column(column, justify="right" if column == "calls" else "left")
    for item in summary["intercepts"]:
        cats.add_row(item["category"], item["stage"], str(item["calls"]))
    console.print(cats)
    return summary["totals"]
