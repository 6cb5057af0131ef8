"""Command-line sub-commands of this package (registered into ``rlguard.cli``):
``policy serve``, ``rollout run`` and ``bench rollout``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from rlguard.errors import RlguardError

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

    from rlguard.settings import get_settings
    from rollout.policy_server import build_server

    limits = get_settings().rollout.policy
    try:
        server = build_server(model, device, limits)
    except (ValueError, OSError) as exc:
        raise RlguardError(f"cannot load the model {model!r}: {exc}") from exc
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

    from rlguard.settings import get_settings
    from rollout.agent import AgentConfig
    from rollout.local_gateway import admin_token_from_settings
    from rollout.runner import RichProgress, RolloutContext, RolloutSpec, run_episodes

    settings = get_settings()
    if scripted is None and policy_url is None:
        raise RlguardError(
            "give a policy: --policy-url URL (vLLM, SGLang, rlguard policy serve) or --scripted FILE"
        )
    token = admin_token_from_settings(settings)
    if token is None:
        raise RlguardError("no admin token: set RLGUARD_ADMIN_TOKEN (or run the gateway with this state dir)")
    spec = RolloutSpec(
        gateway_url=gateway_url or settings.rollout.gateway_url,
        admin_token=token,
        suites=tuple(tasks),
        policy="scripted" if scripted else ("chat" if chat else "completions"),
        policy_url=policy_url,
        model=model,
        served_model_name=served_model,
        script=str(scripted) if scripted else None,
        policy_version=policy_version,
        config=AgentConfig.from_settings(max_turns=max_turns, context_budget_tokens=context_budget),
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
            row["task"], row["status"], reward, str(row["turns"]), str(row["tool_calls"]),
            str(row["sub_trajectories"]), str(row["intercepts"]), (row["error"] or "")[:60],
        )  # fmt: skip
    console.print(table)


def bench_rollout(
    episodes: int = typer.Option(32, "--episodes", min=1, help="Episodes in total"),
    concurrency: int = typer.Option(16, "--concurrency", min=1),
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
) -> None:
    """Scripted policy through an in-process gateway: episodes/s, calls/s, runner overhead per turn."""
    from rollout.bench import run_bench

    numbers = run_bench(episodes=episodes, concurrency=concurrency)
    if as_json:
        print(json.dumps(numbers, indent=2))
        return
    table = Table(title="rollout benchmark (scripted policy, local gateway)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in numbers.items():
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    console.print(table)


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this package's commands to the root app and its benchmark to ``rlguard bench``."""
    app.add_typer(policy_app, name="policy")
    app.add_typer(rollout_app, name="rollout")
    bench.command("rollout")(bench_rollout)
