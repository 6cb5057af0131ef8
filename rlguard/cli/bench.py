"""``rlguard bench ...``: every benchmark, one command each; the measurements live with what they
measure (``sandbox.bench``, ``guard.bench``, ``tasks.check``, ``rlguard.bench``, ``rlguard.loops.bench``,
``trainer.bench``).

A benchmark that returns a flat dict of numbers has it printed by ``print_bench``: one JSON line
with --json, or a table captioned with the load average it ran under. Benchmarks whose results
nest print themselves and return None.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from rlguard.cli.output import console, line, note, print_bench, print_json, table
from rlguard.errors import RlguardError
from rlguard.settings import get_settings
from trainer.errors import TrainerError

JSON_HELP = "Print JSON instead of a table"


class BenchGroup(typer.Typer):
    """``rlguard bench``: what a command registered here returns is printed by ``print_bench``."""

    def command(self, name: str, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # type: ignore[override]
        register = super().command(name, **options)

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def run(*args: Any, **kwargs: Any) -> None:
                numbers = fn(*args, **kwargs)
                if numbers is not None:
                    print_bench(name, numbers, bool(kwargs.get("as_json")))

            register(run)
            return fn

        return decorate


bench_app = BenchGroup(
    help="Benchmarks; each prints a table, or JSON with --json.", no_args_is_help=True, rich_markup_mode=None
)


@bench_app.command("sandbox")
def bench_sandbox(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    samples: int = typer.Option(200, "--samples", min=20, help="Exec round trips measured"),
    concurrent: int = typer.Option(32, "--concurrent", min=1, help="Sandboxes held at once"),
) -> dict[str, Any]:
    """Sandbox start, acquire and exec times.

    Cold start, warm acquire, exec round trip beside docker exec, concurrent sandboxes.
    """
    from rlguard.cli.resources import engine_client
    from sandbox.bench import run_bench

    settings = get_settings()
    engine_client(settings).close()
    return asyncio.run(run_bench(settings, samples=samples, concurrent=concurrent))


@bench_app.command("guard")
def bench_guard(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    corpus: Path | None = typer.Option(None, "--corpus", help="A JSONL corpus (default: the shipped one)"),
    rounds: int = typer.Option(5, "--rounds", min=1, max=1000, help="Passes over the corpus"),
) -> dict[str, Any]:
    """The guard's stage-1 speed.

    Throughput on one core and latency p50/p99 over the corpus.
    """
    from guard.bench import run_guard_bench

    return run_guard_bench(corpus, rounds=rounds)


@bench_app.command("gateway")
def bench_gateway(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    calls: int = typer.Option(300, "--calls", min=20, help="Sequential calls for the latency percentiles"),
    concurrent_calls: int = typer.Option(
        40, "--concurrent-calls", min=5, help="Calls per episode in the 16-episode run"
    ),
) -> dict[str, Any]:
    """The gateway's tool-call round trip.

    HTTP, guard, store and sandbox, beside a raw docker exec; calls/s over 16 episodes.
    """
    from rlguard.bench.gateway import run_bench

    return run_bench(calls=calls, concurrent_calls=concurrent_calls)


@bench_app.command("scale")
def bench_scale(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    episodes: int = typer.Option(24, min=4, help="Episodes per engines run (create, 2 calls, finish)"),
    concurrency: int = typer.Option(8, min=1, help="Episodes in flight in the engines runs"),
    calls: int = typer.Option(30, min=5, help="Calls per episode in the gateways runs (16 episodes)"),
    load_episodes: int = typer.Option(64, min=2, help="Episodes alive at once across both engines"),
) -> dict[str, Any]:
    """Scale out: engines, gateways, and what a kill under load loses.

    1 vs 2 engines (episodes/s), 1 vs 2 gateways on one PostgreSQL (calls/s), a load run, and an
    engine and a gateway killed under running episodes (lost_episodes, leaked_containers).
    """
    from rlguard.bench.scale import run_bench

    return run_bench(episodes=episodes, concurrency=concurrency, calls=calls, load_episodes=load_episodes)


@bench_app.command("grading")
def bench_grading(
    suite: str | None = typer.Option(
        None, "--suite", help="A suite by name or directory (default: the shipped inflection mini suite)"
    ),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Runs per task (the median is kept)"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Grading time beside plain pytest.

    pytest-mode grading against plain pytest of the same tests in the same image (target: at most
    1.3x).
    """
    from rlguard.cli.resources import local_backend, resolve_suite
    from tasks.check import bench_grading as measure
    from tasks.minisuite import build_rows
    from tasks.spec import load_suite
    from tasks.swebench import import_swebench

    settings = get_settings()

    async def run(tasks: list[Any]) -> dict[str, Any]:
        async with local_backend(settings) as backend:
            return await measure(
                backend, tasks, repeats=repeats, image=settings.sandbox.image, limits=settings.sandbox.limits
            )

    with tempfile.TemporaryDirectory(prefix="rlguard-bench-grading-") as tmp:
        if suite is None:
            rows_path, repos_dir = build_rows(Path(tmp))
            import_swebench(rows_path, repos_dir, Path(tmp) / "minisuite")
            directory = Path(tmp) / "minisuite"
        else:
            directory = resolve_suite(settings, suite)
        try:
            report = asyncio.run(run(load_suite(directory)))
        except ValueError as exc:
            raise RlguardError(str(exc)) from None
    if as_json:
        print_json(report)
        return
    shown = table("metric", "value", title="rlguard bench grading")
    for key, value in report.items():
        if not isinstance(value, dict):
            shown.add_row(key, str(value))
    console().print(shown)


@bench_app.command("rollout")
def bench_rollout(
    episodes: int = typer.Option(32, "--episodes", min=1, help="Episodes in total"),
    concurrency: int = typer.Option(16, "--concurrency", min=1, help="Episodes at once"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> dict[str, Any]:
    """Rollout throughput with a scripted policy.

    Through an in-process gateway: episodes/s, calls/s, the runner's overhead per turn.
    """
    from rlguard.bench.rollout import run_bench

    return run_bench(episodes=episodes, concurrency=concurrency)


@bench_app.command("loop")
def bench_loop(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    episodes: int = typer.Option(32, "--episodes", min=4, help="Episodes through each schedule"),
    episodes_per_step: int = typer.Option(2, "--episodes-per-step", min=1, help="Episodes a step trains on"),
    max_staleness: int = typer.Option(1, "--max-staleness", min=0, help="async: versions a token may lag"),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="async: episodes in flight (default: what the staleness gate admits)"
    ),
    max_turns: int = typer.Option(8, "--max-turns", min=1, help="Turns per episode"),
    max_tokens_per_turn: int = typer.Option(
        64, "--max-tokens-per-turn", min=1, help="Tokens the policy may generate per turn"
    ),
) -> dict[str, Any]:
    """The loop's sync and async schedules compared.

    The same episodes through both (tiny model, built-in tasks).
    """
    from rlguard.loops.bench import run_loop_bench

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


@bench_app.command("mcp")
def bench_mcp(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    calls: int = typer.Option(200, "--calls", min=20, help="Sequential calls per path for the percentiles"),
) -> dict[str, Any]:
    """A tool call through the MCP server.

    Over stdio and http, beside the same call through the HTTP API.
    """
    from rlguard.bench.mcp import run_bench

    return run_bench(calls=calls)


@bench_app.command("proxy")
def bench_proxy(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    model: str = typer.Option("tiny", "--model", help="HF model directory served by the policy server"),
    turns: int = typer.Option(60, "--turns", min=10, help="Turns measured per path"),
    max_tokens: int = typer.Option(32, "--max-tokens", min=1, help="Tokens generated per turn"),
) -> dict[str, Any]:
    """A model turn through the gateway's recording proxy.

    Beside the same turn sent straight to the same policy server: proxy_ms_p50, direct_ms_p50 and
    proxy_vs_direct (target <= 1.1).
    """
    from rlguard.bench.proxy import run_bench
    from rollout.tinymodel import resolve_model_name

    return run_bench(resolve_model_name(model, get_settings().state_dir), turns=turns, max_tokens=max_tokens)


@bench_app.command("train")
def bench_train(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    configs: str = typer.Option("tiny,100m", "--configs", help="Comma-separated: tiny, 100m"),
    device: str | None = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)"),
) -> None:
    """Trainer step time and tokens/s.

    Beside a plain forward and backward pass of the same actor and critic.
    """
    from trainer.bench.train_bench import run_train_bench

    try:
        result = run_train_bench([c.strip() for c in configs.split(",") if c.strip()], device)
    except ValueError as exc:
        raise TrainerError(str(exc)) from None
    if as_json:
        print_json(result)
        return
    shown = Table(title="rlguard bench train")
    for column in ("config", "params", "tokens", "step s", "raw fwd+bwd s", "tokens/s", "step / raw"):
        shown.add_column(column)
    for name, row in result["configs"].items():
        shown.add_row(
            name,
            f"{row['actor_parameters'] / 1e6:.1f}M",
            str(row["batch_tokens"]),
            f"{row['step_s']:.3f}",
            f"{row['raw_fwd_bwd_s']:.3f}",
            f"{row['tokens_per_s']:.0f}",
            f"{row['step_vs_raw_fwd_bwd']:.2f}",
        )
    console().print(shown)


@bench_app.command("learn")
def bench_learn(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Seeds per algorithm and horizon"),
    out: Path = typer.Option(Path("runs/bench-learn"), "--out", help="Where curves and results go"),
    budget_tokens: int | None = typer.Option(
        None, "--budget-tokens", min=1000, help="Environment tokens per long-horizon run (default 1.5M)"
    ),
) -> None:
    """PPO with a critic against GRPO.

    On long (compacted, multi-turn) and short synthetic horizons.
    """
    from trainer.bench.learn_bench import run_learn_bench

    result = run_learn_bench(seeds=seeds, out_dir=out, budget_tokens=budget_tokens)
    if as_json:
        print_json(result)
        return
    shown = Table(title=f"rlguard bench learn ({seeds} seeds)")
    for column in (
        "algorithm",
        "long: final",
        "long: mean in training",
        "short: final",
        "short: mean in training",
    ):
        shown.add_column(column)
    for algo in ("ppo", "grpo"):
        shown.add_row(
            algo,
            *(
                f"{result.get(f'{algo}_{horizon}{suffix}', float('nan')):.3f}"
                for horizon in ("long", "short")
                for suffix in ("", "_auc")
            ),
        )
    console().print(shown)
    for path in result.get("plots", []):
        console().print(str(path))


@bench_app.command("credit")
def bench_credit(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    steps: int | None = typer.Option(None, "--steps", min=1, help="Training steps per variant (default 30)"),
    seed: int = typer.Option(0, "--seed", help="Seed of every variant"),
    out: Path = typer.Option(Path("runs/bench-credit"), "--out", help="Where results.json (curves) goes"),
) -> None:
    """Credit for a first-turn decision across three or more compactions.

    PPO with GAE chained across sub-trajectories, against per-row GAE, actor lambda 0.95 and GRPO.
    """
    from trainer.bench.credit_bench import CreditParams, run_credit_bench

    params = CreditParams() if steps is None else replace(CreditParams(), iterations=steps)
    result = run_credit_bench(seed=seed, params=params, out_dir=out)
    if as_json:
        print_json(result, indent=None)
        return
    shown = table(
        "variant",
        "final success",
        "first-turn advantage SNR",
        title=f"rlguard bench credit ({result['steps']} steps, {result['episodes_per_step']} episodes each)",
    )
    variants = {"ppo": "", "ppo_lam095": "_lam095", "ppo_per_row": "_per_row", "grpo": "_grpo"}
    for name, suffix in variants.items():
        success, snr = result[f"{name}_success"], result[f"first_turn_adv_snr{suffix}"]
        shown.add_row(name, f"{success:.3f}", f"{snr:.2f}")
    console().print(shown)
    console().print(
        f"chance {result['chance']:.2f}; gae_vs_mc_error {result['gae_vs_mc_error']:.2e}; "
        f"{result['seconds']:.0f} s (load average {result['load_avg_1m']})"
    )


@bench_app.command("decoy")
def bench_decoy(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (final values, spread and curves)"),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Seeds per regime (the same seeds for every regime)"),
    out: Path = typer.Option(Path("runs/bench-decoy"), "--out", help="Where curves and results go"),
    budget_tokens: int | None = typer.Option(
        None, "--budget-tokens", min=1000, help="Environment tokens per run (default 400k)"
    ),
    regimes: str = typer.Option(
        "none,abort,penalty,decoy,decoy+penalty,no-loophole", "--regimes", help="Comma-separated regimes"
    ),
) -> None:
    """Decoys against aborting and penalising intercepted cheats.

    Six regimes trained with PPO on a loophole environment; final values, curves and a probe of
    whether the policy tells decoys from real answers.
    """
    from trainer.bench.decoy_bench import run_decoy_bench

    names = [name.strip() for name in regimes.split(",") if name.strip()]

    def progress(run: Any) -> None:  # one line per finished run, on stderr (stdout stays JSON)
        note(
            f"{run.regime} seed {run.seed}: honest {run.final['honest_success']:.3f}, "
            f"cheat {run.final['cheat_rate']:.3f}, {run.cpu_seconds:.0f} CPU-s"
        )

    try:
        result = run_decoy_bench(
            seeds=seeds, out_dir=out, budget_tokens=budget_tokens, regimes=names, on_result=progress
        )
    except ValueError as exc:
        raise RlguardError(str(exc)) from None
    if as_json:
        print_json(result)
        return
    columns = {
        "honest_success": "honest",
        "cheat_rate": "cheat",
        "undetected_cheat_rate": "undetected",
        "evasive_share": "evasive",
        "evasive_attempts": "evasive/ep",
        "early_end_rate": "ended early",
        "honest_skill": "skill (no loophole)",
        "reward_var_over_run": "reward var",
        "approx_kl_over_run": "KL/step",
    }
    shown = table(
        "regime",
        *columns.values(),
        "probe: cheat after decoy/miss",
        title=f"rlguard bench decoy ({seeds} seeds, mean ± std; final = fresh tasks after training)",
    )
    for name, entry in result["regimes"].items():
        cells = []
        for column in columns:
            spread = entry["spread"][column]
            cells.append("-" if spread["mean"] is None else f"{spread['mean']:.3f} ± {spread['std']:.3f}")
        probe = entry["probe"]
        cells.append(f"{probe['cheat_after_decoy']:.2f} / {probe['cheat_after_honest_miss']:.2f}")
        shown.add_row(name, *cells)
    console().print(shown)
    rates = ", ".join(
        f"{name} {v['catch_rate']:.2f}" for name, v in result["catch_rates"].items() if v["kind"] != "honest"
    )
    line(f"stage-1 catch rates: {rates}")
    line(
        f"{result['seconds']:.0f} s wall, {result['cpu_seconds']:.0f} CPU-s, load average "
        f"{result['load_average']['before']} -> {result['load_average']['after']}"
    )
    for path in result.get("plots", []):
        line(str(path))


@bench_app.command("distill")
def bench_distill(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    distill_tokens: int | None = typer.Option(None, "--distill-tokens", min=1000, help="Student's budget"),
    teacher_tokens: int | None = typer.Option(
        None, "--teacher-tokens", min=1000, help="Long teacher's budget"
    ),
) -> None:
    """On-policy distillation of two experts.

    Two PPO experts (short and long horizon) distilled into one fresh student (reverse KL).
    """
    from trainer.bench.distill_bench import DistillParams, run_distill_bench

    params = DistillParams()
    if distill_tokens is not None:
        params = replace(params, distill_budget=distill_tokens)
    if teacher_tokens is not None:
        params = replace(params, teacher_budget={**params.teacher_budget, "long": teacher_tokens})
    result = run_distill_bench(params)
    if as_json:
        print_json(result)
        return
    shown = Table(title="rlguard bench distill")
    for column in ("group", "teacher", "student before", "student after", "after / teacher", "reverse KL"):
        shown.add_column(column)
    for group in result["teacher_success"]:
        shown.add_row(
            group,
            f"{result['teacher_success'][group]:.3f}",
            f"{result['student_success_before'][group]:.3f}",
            f"{result['student_success_after'][group]:.3f}",
            f"{result['student_vs_teacher'][group]:.2f}",
            f"{result['reverse_kl_by_group_before'][group]:.3f} -> "
            f"{result['reverse_kl_by_group_after'][group]:.3f}",
        )
    console().print(shown)
    console().print(
        f"reverse KL {result['reverse_kl_before']:.3f} -> {result['reverse_kl_after']:.3f} "
        f"({result['reverse_kl_reduction']:.1f}x); {result['seconds']:.0f} s"
    )


def register(app: typer.Typer) -> None:
    """Add ``rlguard bench``."""
    app.add_typer(bench_app, name="bench")
