"""Commands that wire the layers together (registered into ``rlguard.cli``): ``policy serve``,
``rollout run``, ``bench rollout``, ``train`` and ``loop``.

They live at the top because they resolve ``--model tiny`` to the locally built demo model, start an
in-process gateway or read the whole settings object; ``rollout/`` and ``trainer/`` import none of that.

Imports inside the commands keep ``rlguard --version`` and ``--help`` fast: docker, torch,
SQLAlchemy and the packages behind them load only for the command that runs.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlguard.settings import get_settings
from rlguard.tinymodel import resolve_model_name
from rollout.errors import RolloutError
from sandbox.textsafe import terminal_safe
from trainer.errors import TrainerError

console = Console()
policy_app = typer.Typer(help="Policy servers (OpenAI-compatible).", no_args_is_help=True)
rollout_app = typer.Typer(help="Agent episodes against a policy, through the gateway.", no_args_is_help=True)


@policy_app.command("serve")
def policy_serve(
    model: str = typer.Option("tiny", "--model", help="HF model directory, or 'tiny' (built locally)"),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N"),
    host: str | None = typer.Option(None, "--host", help="Listen address (default from settings)"),
    port: int | None = typer.Option(None, "--port", help="Listen port (default from settings)"),
) -> None:
    """Serve a HF causal LM with /v1/completions (token ids + logprobs), chat, and weight reload."""
    import uvicorn

    from rollout.policy_server import build_server

    limits = get_settings().rollout.policy
    try:
        name = "tiny" if model == "tiny" else None
        server = build_server(resolve_model_name(model), device, limits, name=name)
    except (ValueError, OSError) as exc:
        raise RolloutError(f"cannot load the model {model!r}: {exc}") from exc
    uvicorn.run(server.app, host=host or limits.host, port=port or limits.port, log_level="warning")


@rollout_app.command("run")
def rollout_run(
    tasks: list[str] = typer.Option(["builtin"], "--tasks", help="Suite: a built-in name or a directory"),
    task: list[str] = typer.Option([], "--task", help="Only these task ids (repeatable)"),
    policy_url: str | None = typer.Option(None, "--policy-url", help="OpenAI-compatible base URL (…/v1)"),
    chat: bool = typer.Option(False, "--chat", help="Use /chat/completions (no token ids; not trainable)"),
    scripted: Path | None = typer.Option(None, "--scripted", help="Scripted policy: a script YAML file"),
    model: str = typer.Option("tiny", "--model", help="Tokenizer (and scorer) model: HF directory or 'tiny'"),
    served_model: str = typer.Option("default", "--served-model", help="'model' field sent to the endpoint"),
    policy_version: str = typer.Option("0", "--policy-version", help="Recorded on episodes/sub-trajectories"),
    episodes: int = typer.Option(1, "--episodes", min=1, help="Episodes per task"),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="Episodes at once"),
    ray_address: str | None = typer.Option(None, "--ray", help="Ray address, or 'local' for a local Ray"),
    ray_workers: int = typer.Option(2, "--ray-workers", min=1, help="Ray actors"),
    gateway_url: str | None = typer.Option(None, "--gateway-url", help="Gateway (default from settings)"),
    max_turns: int | None = typer.Option(None, "--max-turns", min=1),
    context_budget: int | None = typer.Option(None, "--context-budget", min=256, help="Compaction threshold"),
    as_json: bool = typer.Option(False, "--json", help="Print results as JSON"),
) -> None:
    """Run episodes of a suite against a policy through a running gateway."""
    import asyncio

    from rlguard.local_gateway import admin_token_from_settings
    from rollout.agent import AgentConfig
    from rollout.runner import RichProgress, RolloutContext, RolloutSpec, run_episodes

    settings = get_settings()
    if scripted is None and policy_url is None:
        raise RolloutError(
            "give a policy: --policy-url URL (vLLM, SGLang, rlguard policy serve) or --scripted FILE"
        )
    token = admin_token_from_settings(settings)
    if token is None:
        raise RolloutError("no admin token: set RLGUARD_ADMIN_TOKEN (or run the gateway with this state dir)")
    spec = RolloutSpec(
        gateway_url=gateway_url or settings.rollout.gateway_url,
        admin_token=token,
        suites=tuple(tasks),
        policy="scripted" if scripted else ("chat" if chat else "completions"),
        policy_url=policy_url,
        model=str(resolve_model_name(model)),
        served_model_name=served_model,
        script=str(scripted) if scripted else None,
        policy_version=policy_version,
        config=AgentConfig.from_settings(
            settings.rollout, max_turns=max_turns, context_budget_tokens=context_budget
        ),
    )
    k = concurrency or settings.rollout.concurrency
    if ray_address:
        from rollout.ray_runner import init_ray, run_on_ray

        local = RolloutContext(spec)
        specs = local.episode_specs(episodes, task or None)
        asyncio.run(local.aclose())
        init_ray(ray_address)
        with RichProgress(len(specs)) as progress:
            results = run_on_ray(spec, specs, k, ray_workers, on_done=progress)
    else:

        async def main():
            ctx = RolloutContext(spec)
            try:
                specs = ctx.episode_specs(episodes, task or None)
                with RichProgress(len(specs)) as progress:
                    return await run_episodes(ctx, specs, k, on_done=progress), progress
            finally:
                await ctx.aclose()

        results, progress = asyncio.run(main())
    if as_json:
        print(json.dumps([_result_row(r) for r in results], indent=2))
    else:
        _print_results(results)


def _result_row(result) -> dict:
    return {
        "task": result.task,
        "episode_id": result.episode_id,
        "status": result.status,
        "reward": result.reward,
        "turns": result.turns,
        "tool_calls": result.tool_calls,
        "parse_errors": result.parse_errors,
        "generated_tokens": result.generated_tokens,
        "sub_trajectories": len(result.sub_trajectories),
        "compactions": result.compactions,
        "intercepts": result.details.get("intercepts", 0),
        "error": result.error,
    }


def _print_results(results) -> None:
    table = Table(title="episodes")
    for column in ("task", "status", "reward", "turns", "calls", "sub-traj", "intercepts", "error"):
        table.add_column(column)
    for r in results:
        row = _result_row(r)
        reward = "-" if row["reward"] is None else f"{row['reward']:.2f}"
        table.add_row(
            Text(terminal_safe(row["task"])), Text(terminal_safe(row["status"])), reward, str(row["turns"]),
            str(row["tool_calls"]), str(row["sub_trajectories"]), str(row["intercepts"]),
            Text(terminal_safe((row["error"] or "")[:60])),
        )  # fmt: skip
    console.print(table)


def bench_rollout(
    episodes: int = typer.Option(32, "--episodes", min=1, help="Episodes in total"),
    concurrency: int = typer.Option(16, "--concurrency", min=1),
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
) -> dict[str, Any]:
    """Scripted policy through an in-process gateway: episodes/s, calls/s, runner overhead per turn."""
    from rlguard.rollout_bench import run_bench

    return run_bench(episodes=episodes, concurrency=concurrency)


ALGOS = ("ppo", "grpo", "rloo", "reinforce_pp", "opd")


def parse_pairs(values: list[str], option: str) -> dict[str, str]:
    """``["a=x", "b=y"]`` -> ``{"a": "x", "b": "y"}``; a clear error for anything else."""
    pairs: dict[str, str] = {}
    for value in values:
        key, sep, target = value.partition("=")
        if not sep or not key.strip() or not target.strip():
            raise TrainerError(f"{option} takes KEY=VALUE, got {value!r}")
        if key.strip() in pairs:
            raise TrainerError(f"{option} {key.strip()!r} given twice")
        pairs[key.strip()] = target.strip()
    return pairs


def teacher_settings(teachers: list[str], routes: list[str], reward_weight: float | None) -> dict[str, Any]:
    """Trainer settings for ``--algo opd``: teacher directories (``tiny`` allowed) and routes."""
    from trainer.train import resolve_model

    named = {
        name: str(resolve_model(resolve_model_name(path)))
        for name, path in parse_pairs(teachers, "--teacher").items()
    }
    routed = parse_pairs(routes, "--route")
    unknown = sorted(set(routed.values()) - set(named))
    if unknown:
        raise TrainerError(f"--route names unknown teachers {unknown}; --teacher gave {sorted(named)}")
    values: dict[str, Any] = {"teachers": named, "routes": routed} if named else {}
    if reward_weight is not None:
        values["reward_weight"] = reward_weight
    return values


def _settings(algo: str, overrides: dict[str, Any]):
    """The trainer settings from the environment, with the command line's explicit values on top."""
    from pydantic import ValidationError

    if algo not in ALGOS:
        raise TrainerError(f"--algo must be one of {', '.join(ALGOS)}, not {algo!r}")
    values = {k: v for k, v in overrides.items() if v is not None}
    try:
        return type(get_settings().trainer).model_validate(
            get_settings().trainer.model_dump() | {"algo": algo, **values}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise TrainerError(f"bad trainer setting {first['loc']}: {first['msg']}") from None


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
    )


def _info(metrics: dict[str, float]) -> str:
    keys = (
        ("reward", "data/reward_mean"),
        ("pg", "actor/pg_loss"),
        ("vf", "critic/value_loss"),
        ("ev", "critic/explained_variance"),
        ("tok/s", "perf/tokens_per_s"),
    )
    return "  ".join(f"{label} {metrics[key]:.3g}" for label, key in keys if key in metrics)


def train(
    algo: str = typer.Option("ppo", "--algo", help="ppo (GAE + critic) | grpo | rloo | reinforce_pp | opd"),
    model: str = typer.Option("tiny", "--model", help="HF model directory, or 'tiny' (built locally)"),
    steps: int = typer.Option(1, "--steps", min=1, help="Training steps to run"),
    out: Path = typer.Option(Path("runs/train"), "--out", help="Run directory (checkpoints, metrics)"),
    policy_url: str | None = typer.Option(None, "--policy-url", help="Policy server to reload each step"),
    database_url: str | None = typer.Option(None, "--database-url", help="Store URL (default: settings)"),
    episodes_per_step: int = typer.Option(64, "--episodes-per-step", min=1),
    wait_s: float = typer.Option(0.0, "--wait-s", min=0, help="Wait this long for data before stopping"),
    actor_lr: float | None = typer.Option(None, "--actor-lr"),
    critic_lr: float | None = typer.Option(None, "--critic-lr"),
    kl_coef: float | None = typer.Option(None, "--kl-coef"),
    ppo_epochs: int | None = typer.Option(None, "--ppo-epochs"),
    device: str | None = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)"),
    teacher: list[str] = typer.Option([], "--teacher", help="opd: NAME=PATH of a teacher (repeatable)"),
    route: list[str] = typer.Option([], "--route", help="opd: GROUP=NAME, a task group's teacher"),
    reward_weight: float | None = typer.Option(None, "--reward-weight", help="opd: weight of task reward"),
) -> None:
    """Train on the store's unconsumed episodes: checkpoint each step, then reload the policy server.

    ``--algo opd`` distils teachers into the policy: each sample's tokens are scored by the teacher
    its task group (the suite) is routed to, and the advantage of each action token is the teacher's
    logprob minus the student's (reverse KL), plus ``--reward-weight`` x the task reward's.

    Under ``torchrun --nproc_per_node N -m rlguard train ...`` it runs data-parallel (DDP, or
    FSDP2 with RLGUARD_TRAINER__PARALLEL=fsdp).
    """
    from trainer.runtime import init_runtime, shutdown_runtime
    from trainer.train import TrainingRun, resolve_model

    if algo == "opd" and not teacher:
        raise TrainerError("--algo opd needs at least one --teacher NAME=PATH")
    settings = _settings(
        algo,
        {"actor_lr": actor_lr, "critic_lr": critic_lr, "kl_coef": kl_coef, "ppo_epochs": ppo_epochs}
        | teacher_settings(teacher, route, reward_weight),
    )
    url = database_url or get_settings().resolved_database_url
    runtime = init_runtime(settings.parallel, device=device)
    model_dir = resolve_model(resolve_model_name(model))
    run = TrainingRun(out, model_dir, url, settings, runtime, policy_url=policy_url)
    done = 0
    progress = _progress() if runtime.is_main else None
    try:
        with progress or contextlib.nullcontext():
            task = progress.add_task(f"train {algo}", total=steps, info="") if progress else None
            deadline = time.monotonic() + wait_s
            while done < steps:
                result = run.step(episodes_per_step)
                if result is None:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(min(2.0, max(deadline - time.monotonic(), 0.0)))
                    continue
                done += 1
                deadline = time.monotonic() + wait_s
                if progress is not None:
                    progress.update(task, advance=1, info=_info(result.metrics))
    finally:
        run.close()
        shutdown_runtime(runtime)
    if runtime.is_main:
        if done == 0:
            raise TrainerError(f"the store at {url} holds no unconsumed, ended episodes to train on")
        console.print(f"{done} step(s); metrics in {out / 'metrics.jsonl'}; policy {run.policy_checkpoint}")


def loop(
    algo: str = typer.Option("ppo", "--algo", help="ppo | grpo | rloo | reinforce_pp"),
    model: str = typer.Option("tiny", "--model", help="Starting policy: HF directory or 'tiny'"),
    iterations: int = typer.Option(2, "--iterations", min=1, help="rollout -> train -> reload rounds"),
    episodes_per_task: int = typer.Option(2, "--episodes-per-task", min=1),
    tasks: list[str] = typer.Option(["builtin"], "--tasks", help="Task suite(s)"),
    task: list[str] = typer.Option([], "--task", help="Only these task ids (repeatable)"),
    out: Path = typer.Option(Path("runs/loop"), "--out", help="Run directory"),
    max_turns: int | None = typer.Option(None, "--max-turns", min=1),
    max_tokens_per_turn: int | None = typer.Option(None, "--max-tokens-per-turn", min=1),
    as_json: bool = typer.Option(False, "--json", help="Print each round's summary as JSON"),
    mode: str = typer.Option("sync", "--mode", help="sync: rollout and training in turn; async: overlapped"),
    max_staleness: int = typer.Option(1, "--max-staleness", min=0, help="async: versions a token may lag"),
    episodes: int | None = typer.Option(None, "--episodes", min=1, help="async: total episodes to play"),
    episodes_per_step: int = typer.Option(2, "--episodes-per-step", min=1, help="async: episodes per step"),
    workers: int = typer.Option(2, "--workers", min=1, help="async: episodes in flight"),
    queue_size: int | None = typer.Option(
        None, "--queue-size", min=1, help="async: the trainer queue's bound"
    ),
    policy_url: str | None = typer.Option(
        None, "--policy-url", help="A policy server already running (vLLM, SGLang), not the built-in one"
    ),
    reload_protocol: str | None = typer.Option(
        None, "--reload-protocol", help="How weights reach --policy-url: builtin | sglang | vllm"
    ),
    served_model_name: str = typer.Option(
        "default", "--served-model-name", help="The model name --policy-url answers to"
    ),
) -> None:
    """The closed loop on the built-in policy server and tasks: rollout, train, reload, repeat.

    ``--mode async`` overlaps them: workers keep playing while the trainer trains on what landed,
    episodes in flight go on with new weights, and nothing older than ``--max-staleness`` versions
    is trained on (the rollout is held back, and what still got too old is dropped).
    """
    if mode not in ("sync", "async"):
        raise TrainerError(f"--mode must be sync or async, not {mode!r}")
    settings = _settings(algo, {"reload_protocol": reload_protocol})
    server = {"policy_url": policy_url, "served_model_name": served_model_name}
    if mode == "async":
        _loop_async(
            settings,
            as_json,
            model=model,
            total_episodes=episodes or iterations * episodes_per_step,
            episodes_per_step=episodes_per_step,
            workers=workers,
            queue_size=queue_size or (max_staleness + 1) * episodes_per_step,
            max_staleness=max_staleness,
            suites=tuple(tasks),
            task_filter=tuple(task),
            run_dir=out,
            max_turns=max_turns,
            max_tokens_per_turn=max_tokens_per_turn,
            **server,
        )
        return
    from rlguard.loop import LoopConfig, run_loop

    config = LoopConfig(
        model=model,
        iterations=iterations,
        episodes_per_task=episodes_per_task,
        suites=tuple(tasks),
        task_filter=tuple(task),
        run_dir=out,
        max_turns=max_turns,
        max_tokens_per_turn=max_tokens_per_turn,
        **server,
    )
    rounds = run_loop(config, settings, on_round=None if as_json else _print_round)
    if as_json:
        print(json.dumps(rounds, indent=2))


def _loop_async(settings: Any, as_json: bool, **options: Any) -> None:
    from rlguard.async_loop import AsyncLoopConfig, run_async_loop

    try:
        config = AsyncLoopConfig(**options)
    except ValueError as exc:
        raise TrainerError(str(exc)) from None
    summary = run_async_loop(config, settings, on_step=None if as_json else _print_step)
    if as_json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        console.print({k: v for k, v in summary.items() if k != "per_step"})


def _print_step(summary: dict[str, Any]) -> None:
    metrics = summary["metrics"]
    console.print(
        f"step {summary['step']}: {summary['episodes']} episodes, policy {summary['policy_version']}, "
        f"queue {summary['queue']}, staleness {metrics.get('data/staleness_mean', 0.0):.2f}, "
        f"dropped {metrics.get('data/dropped_episodes', 0.0):.0f}"
    )


def bench_loop(
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    episodes: int = typer.Option(32, "--episodes", min=4, help="Episodes through each loop"),
    episodes_per_step: int = typer.Option(2, "--episodes-per-step", min=1),
    max_staleness: int = typer.Option(1, "--max-staleness", min=0),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="async episodes in flight (default: what the staleness gate admits)"
    ),
    max_turns: int = typer.Option(8, "--max-turns", min=1, help="Turns per episode"),
    max_tokens_per_turn: int = typer.Option(64, "--max-tokens-per-turn", min=1),
) -> dict[str, Any]:
    """The same episodes through ``loop --mode sync`` and ``--mode async`` (tiny model, builtin tasks)."""
    from rlguard.loop_bench import run_loop_bench

    try:
        return run_loop_bench(
            episodes,
            episodes_per_step,
            max_staleness,
            max_turns=max_turns,
            max_tokens_per_turn=max_tokens_per_turn,
            workers=workers,
        )
    except ValueError as exc:
        raise TrainerError(str(exc)) from None


def _print_round(summary: dict[str, Any]) -> None:
    console.print(
        f"round {summary['round']}: {summary['episodes']} episodes, "
        f"mean reward {summary['mean_reward']:.3f}, step {summary['step']}, "
        f"policy {summary['policy_version']}"
    )


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this package's commands to the root app and its benchmark to ``rlguard bench``."""
    app.add_typer(policy_app, name="policy")
    app.add_typer(rollout_app, name="rollout")
    bench.command("rollout")(bench_rollout)
    app.command("train")(train)
    app.command("loop")(loop)
    bench.command("loop")(bench_loop)
