"""``rlguard rollout run``: episodes of a suite against a policy, through a running gateway.

Before any episode it checks what would otherwise make every episode fail: the gateway answers and
accepts the admin token, it serves the chosen tasks, and the policy server answers. The exit status
is non-zero when one of those is missing, or when every episode ended in an error.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import typer

from rlguard.cli.output import cell, console, group, print_error, print_json, table
from rlguard.cli.policy import MODEL_HELP
from rlguard.settings import get_settings
from rollout.errors import RolloutError

rollout_app = group("Agent episodes against a policy, through the gateway.")
SUITES_HELP = "A suite by name (built-in, built or imported) or directory (repeatable)"


def check_gateway(url: str, admin_token: str) -> set[str]:
    """The task ids a running gateway serves; one clear error when it does not answer or refuses."""
    import httpx

    try:
        response = httpx.get(
            f"{url.rstrip('/')}/v1/tasks", headers={"Authorization": f"Bearer {admin_token}"}, timeout=30
        )
    except httpx.HTTPError as exc:
        raise RolloutError(
            f"no gateway answers at {url} ({exc.__class__.__name__}); start one: rlguard serve"
        ) from None
    if response.status_code in (401, 403):
        raise RolloutError(f"the gateway at {url} refused the admin token (RLGUARD_ADMIN_TOKEN)")
    if response.status_code != 200:
        raise RolloutError(f"the gateway at {url} answered {response.status_code} to GET /v1/tasks")
    try:
        return {task["id"] for task in response.json()}
    except (ValueError, KeyError, TypeError):
        raise RolloutError(f"{url} does not answer as an rlguard gateway") from None


def check_policy(url: str) -> None:
    """One clear error when nothing answers at the policy server's URL (any HTTP answer will do)."""
    import httpx

    try:
        httpx.get(f"{url.rstrip('/')}/models", timeout=30)
    except httpx.HTTPError as exc:
        raise RolloutError(f"no policy server answers at {url} ({exc.__class__.__name__})") from None


def chosen_tasks(suites: tuple[str, ...], wanted: list[str]) -> list[str]:
    """The ids (suite/id) of the tasks ``--task`` names in ``suites`` (all when none is named); an
    id that names no task is one error."""
    from tasks.spec import TaskRegistry

    tasks = TaskRegistry(list(suites)).list()
    unknown = [w for w in wanted if not any(w in (t.id, t.task_id) for t in tasks)]
    if unknown:
        names = ", ".join(Path(s).name for s in suites)
        known = ", ".join(t.task_id for t in tasks[:20])
        raise RolloutError(f"no task {unknown[0]!r} in {names}; known: {known}")
    return [t.id for t in tasks if not wanted or t.id in wanted or t.task_id in wanted]


def check_served(task_ids: list[str], served: set[str], gateway_url: str) -> None:
    """Every chosen task is one the gateway serves."""
    missing = sorted(set(task_ids) - served)
    if missing:
        raise RolloutError(
            f"the gateway at {gateway_url} does not serve {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''}; start it with: rlguard serve --suite SUITE"
        )


@rollout_app.command("run")
def rollout_run(
    suite: list[str] = typer.Option(["builtin"], "--suite", help=SUITES_HELP),
    task: list[str] = typer.Option([], "--task", help="Only these task ids (repeatable)"),
    policy_url: str | None = typer.Option(
        None,
        "--policy-url",
        help="An OpenAI-compatible base URL ending in /v1 (vLLM, SGLang, rlguard policy serve)",
    ),
    chat: bool = typer.Option(False, "--chat", help="Use /chat/completions (no token ids: not trainable)"),
    scripted: Path | None = typer.Option(
        None,
        "--scripted",
        exists=True,
        dir_okay=False,
        help="Play a scripted policy from this script YAML file",
    ),
    model: str = typer.Option("tiny", "--model", help=f"Tokenizer (and scripted scorer): {MODEL_HELP}"),
    served_model_name: str = typer.Option(
        "default", "--served-model-name", help="The model name sent to the policy server"
    ),
    policy_version: str = typer.Option(
        "0", "--policy-version", help="Recorded on episodes and sub-trajectories"
    ),
    episodes: int = typer.Option(1, "--episodes", min=1, help="Episodes per task"),
    concurrency: int | None = typer.Option(
        None, "--concurrency", min=1, help="Episodes at once (default: RLGUARD_ROLLOUT__CONCURRENCY)"
    ),
    ray_address: str | None = typer.Option(
        None, "--ray", metavar="ADDRESS", help="A Ray address, or 'local' for a local Ray"
    ),
    ray_workers: int = typer.Option(2, "--ray-workers", min=1, help="Ray actors (with --ray)"),
    gateway_url: str | None = typer.Option(
        None, "--gateway-url", help="The gateway (default: RLGUARD_ROLLOUT__GATEWAY_URL)"
    ),
    max_turns: int | None = typer.Option(
        None, "--max-turns", min=1, help="Turns per episode (default: RLGUARD_ROLLOUT__MAX_TURNS)"
    ),
    context_budget: int | None = typer.Option(
        None, "--context-budget", min=256, help="Context tokens past which the episode is compacted"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the episodes as JSON"),
) -> None:
    """Run episodes of a suite against a policy.

    The episodes go through a running gateway (rlguard serve). The exit status is 2 when the
    gateway, the policy server or a task is missing, or when every episode failed.
    """
    from rlguard.cli.policy import check_model
    from rlguard.cli.resources import resolve_suites
    from rlguard.loops.local_gateway import admin_token_from_settings
    from rollout.agent import AgentConfig
    from rollout.runner import RolloutSpec

    settings = get_settings()
    if scripted is None and policy_url is None:
        raise RolloutError(
            "give a policy: --policy-url URL (vLLM, SGLang, rlguard policy serve) or --scripted FILE"
        )
    if scripted is not None and (policy_url is not None or chat):
        raise RolloutError("--scripted plays its own policy: give it without --policy-url and --chat")
    suites = resolve_suites(settings, suite)
    task_ids = chosen_tasks(suites, task)
    token = admin_token_from_settings(settings)
    if token is None:
        raise RolloutError(
            "no admin token: set RLGUARD_ADMIN_TOKEN (or run where the gateway's state directory is)"
        )
    url = gateway_url or settings.rollout.gateway_url
    check_served(task_ids, check_gateway(url, token), url)
    if policy_url is not None:
        check_policy(policy_url)
    spec = RolloutSpec(
        gateway_url=url,
        admin_token=token,
        suites=suites,
        policy="scripted" if scripted else ("chat" if chat else "completions"),
        policy_url=policy_url,
        model=str(check_model(model)),
        served_model_name=served_model_name,
        script=str(scripted) if scripted else None,
        policy_version=policy_version,
        config=AgentConfig.from_settings(
            settings.rollout, max_turns=max_turns, context_budget_tokens=context_budget
        ),
    )
    try:
        results = _run(
            spec, episodes, task, concurrency or settings.rollout.concurrency, ray_address, ray_workers
        )
    except KeyboardInterrupt:  # the episodes in flight were uploaded and finished on the way out
        print_error("interrupted: the episodes in flight were finished (end_reason error)")
        raise typer.Exit(130) from None
    if as_json:
        print_json([_result_row(r) for r in results])
    else:
        _print_results(results)
    if results and all(r.status == "error" for r in results):
        raise RolloutError(f"every episode failed ({len(results)}); the first: {results[0].error}")


def _run(
    spec: Any, episodes: int, task: list[str], k: int, ray_address: str | None, ray_workers: int
) -> list[Any]:
    from rollout.runner import RichProgress, RolloutContext, run_episodes

    if ray_address:
        from rollout.ray_runner import init_ray, run_on_ray

        local = RolloutContext(spec)
        specs = local.episode_specs(episodes, task or None)
        asyncio.run(local.aclose())
        init_ray(ray_address)
        with RichProgress(len(specs)) as progress:
            return run_on_ray(spec, specs, k, ray_workers, on_done=progress)

    async def main() -> list[Any]:
        ctx = RolloutContext(spec)
        try:
            specs = ctx.episode_specs(episodes, task or None)
            with RichProgress(len(specs)) as progress:
                return await run_episodes(ctx, specs, k, on_done=progress)
        finally:
            await ctx.aclose()

    return asyncio.run(main())


def _result_row(result: Any) -> dict[str, Any]:
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


def _print_results(results: list[Any]) -> None:
    shown = table("task", "status", "reward", "turns", "calls", "subtraj", "icpt", "error", title="episodes",
                  caption="subtraj: sub-trajectories, icpt: intercepted calls")  # fmt: skip
    for r in results:
        row = _result_row(r)
        reward = "-" if row["reward"] is None else f"{row['reward']:.2f}"
        shown.add_row(
            cell(row["task"]), cell(row["status"]), reward, str(row["turns"]), str(row["tool_calls"]),
            str(row["sub_trajectories"]), str(row["intercepts"]), cell(row["error"], 120),
        )  # fmt: skip
    console().print(shown)


def register(app: typer.Typer) -> None:
    """Add ``rlguard rollout``."""
    app.add_typer(rollout_app, name="rollout")
