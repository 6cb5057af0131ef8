"""``rlguard loop``: the closed RL loop on one machine.

Each round: the built-in policy server (serving the newest committed checkpoint) runs a batch of
episodes through an in-process gateway (guard, Docker sandboxes, store); the trainer takes exactly
those episodes from the store, trains one step, commits the checkpoint and asks the policy server to
reload it; the next round's episodes carry the new policy version.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlguard.cpu_meter import busy_cpu_seconds
from rlguard.local_gateway import LocalGateway, local_gateway
from rlguard.policy_process import gateway_process, policy_server_process
from rlguard.settings import get_settings
from rlguard.tinymodel import resolve_model_name
from rollout.agent import AgentConfig
from rollout.policy_server import build_server
from rollout.runner import RolloutContext, RolloutSpec, run_episodes
from rollout.serving import serve_in_thread
from trainer.runtime import init_runtime
from trainer.settings import TrainerSettings
from trainer.train import TrainingRun, resolve_model


@dataclass(frozen=True)
class LoopConfig:
    model: str = "tiny"
    iterations: int = 2
    episodes_per_task: int = 2
    suites: tuple[str, ...] = ("builtin",)
    task_filter: tuple[str, ...] = ()
    run_dir: Path = Path("runs/loop")
    max_turns: int | None = None
    max_tokens_per_turn: int | None = None
    concurrency: int | None = None
    device: str = "cpu"
    server_process: bool = False  # the policy server in a child process (as the async loop runs it)
    gateway_process: bool = False  # the gateway in a child process (as the async loop runs it)
    trainer_threads: int | None = None  # torch threads while training (None: torch's default)
    policy_url: str | None = None  # a policy server already running (vLLM, SGLang): not started here
    served_model_name: str = "default"  # the model name that server answers to


def run_loop(
    config: LoopConfig,
    settings: TrainerSettings,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run ``config.iterations`` rounds; returns one summary per round."""
    threads = torch.get_num_threads()
    if config.trainer_threads is not None:
        torch.set_num_threads(config.trainer_threads)
    try:
        return _run(config, settings, on_round)
    finally:
        torch.set_num_threads(threads)


def open_loop_run(
    model: str, run_dir: Path, device: str, settings: TrainerSettings
) -> tuple[TrainingRun, Path]:
    """A loop's training run (resumed when ``run_dir`` holds one) and the model it started from."""
    model_path = resolve_model(resolve_model_name(model))
    run = TrainingRun(
        run_dir,
        model_path,
        get_settings().resolved_database_url,
        settings,
        init_runtime(device=device),
        run_name=str(Path(run_dir).resolve())[-200:],
    )
    return run, model_path


def serve_loop_policy(
    run: TrainingRun, device: str, in_child_process: bool, external_url: str | None = None
) -> Any:
    """The policy server of a loop, serving the run's current checkpoint under its version: in a child
    process (its own interpreter lock), a thread, or the server at ``external_url`` that someone else
    runs (weights reach it through ``reload_protocol``). A context manager yielding the base URL."""
    if external_url is not None:
        return _external_policy(run, external_url)
    version = str(run.trainer.policy_version)
    if in_child_process:
        return policy_server_process(run.policy_checkpoint, device, version)
    server = build_server(str(run.policy_checkpoint), device, get_settings().rollout.policy)
    server.version = version
    return serve_in_thread(server.app, startup_timeout_s=120)


@contextlib.contextmanager
def _external_policy(run: TrainingRun, url: str) -> Iterator[str]:
    """An external server starts on the base model: a resumed run pushes its checkpoint first."""
    base = url.rstrip("/").removesuffix("/v1")
    if run.trainer.policy_version:
        run.policy_url = base
        run.weight_sync().push(run.policy_checkpoint, str(run.trainer.policy_version))
    yield base


def loop_rollout_spec(
    config: Any, gateway: LocalGateway, policy_url: str, model_path: Path, version: str
) -> RolloutSpec:
    """What a loop's rollout needs (``config``: a sync or async loop's), as plain data."""
    return RolloutSpec(
        gateway_url=gateway.url,
        admin_token=gateway.admin_token,
        suites=config.suites,
        policy="completions",
        policy_url=f"{policy_url}/v1",
        served_model_name=config.served_model_name,
        model=str(model_path),
        policy_version=version,
        config=AgentConfig.from_settings(
            get_settings().rollout,
            max_turns=config.max_turns,
            max_tokens_per_turn=config.max_tokens_per_turn,
        ),
    )


def _run(
    config: LoopConfig, settings: TrainerSettings, on_round: Callable[[dict[str, Any]], None] | None
) -> list[dict[str, Any]]:
    app_settings = get_settings()
    run, model_path = open_loop_run(config.model, config.run_dir, config.device, settings)
    serving = serve_loop_policy(run, config.device, config.server_process, config.policy_url)
    try:
        with (
            serving as policy_url,
            gateway_process(app_settings) if config.gateway_process else local_gateway(app_settings) as gw,
        ):
            run.policy_url = policy_url
            spec = loop_rollout_spec(config, gw, policy_url, model_path, str(run.trainer.policy_version))
            return asyncio.run(_rounds(spec, config, run, on_round))
    finally:
        run.close()


async def _rounds(
    spec: RolloutSpec,
    config: LoopConfig,
    run: TrainingRun,
    on_round: Callable[[dict[str, Any]], None] | None,
) -> list[dict[str, Any]]:
    """The rounds on one rollout context (tokenizer, tasks, HTTP pools are built once, not per
    round); the trainer steps on this event loop, as nothing else is in flight between rounds."""
    ctx = RolloutContext(spec, version_source=lambda: str(run.trainer.policy_version))
    summaries: list[dict[str, Any]] = []
    started = time.perf_counter()  # servers up: from here on, rollout and training only
    cpu_started = busy_cpu_seconds()
    try:
        episodes = ctx.episode_specs(config.episodes_per_task, list(config.task_filter) or None)
        concurrency = config.concurrency or len(episodes)
        for round_index in range(config.iterations):
            results = await run_episodes(ctx, episodes, concurrency, with_intercepts=False)
            trainable = [r for r in results if r.episode_id and r.sub_trajectories]
            step = run.step(max_episodes=max(len(trainable), 1)) if trainable else None
            rewards = [r.reward for r in results if r.reward is not None]
            summary = {
                "round": round_index,
                "episodes": len(results),
                "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
                "statuses": sorted({r.status for r in results}),
                "step": step.step if step else None,
                "policy_version": run.trainer.policy_version,
                "checkpoint": str(step.checkpoint / "actor") if step else None,
                "metrics": step.metrics if step else {},
                "seconds": time.perf_counter() - started,
                "busy_cpu_s": busy_cpu_seconds() - cpu_started,  # the machine's, all processes
            }
            summaries.append(summary)
            if on_round is not None:
                on_round(summary)
    finally:
        await ctx.aclose()
    return summaries
