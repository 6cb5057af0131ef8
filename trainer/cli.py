"""Command-line sub-commands of this package (registered into ``rlguard.cli``):
``plot``, ``bench train`` and ``bench learn``. ``train`` and ``loop`` resolve the tiny demo model and
run the whole stack, so they live at the top (``rlguard/run_commands.py``).

Imports inside the commands keep ``rlguard --version`` and ``--help`` fast: docker, torch,
SQLAlchemy and the packages behind them load only for the command that runs.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from trainer.errors import TrainerError

console = Console()


def plot(run_dir: Path = typer.Argument(..., help="A run directory holding metrics.jsonl")) -> None:
    """Draw a run's curves (each metric; learning curves for bench learn) to PNG files beside it."""
    from trainer.plot import plot_run

    for path in plot_run(run_dir):
        console.print(str(path))


def bench_train(
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    configs: str = typer.Option("tiny,100m", "--configs", help="Comma-separated: tiny, 100m"),
    device: str | None = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)"),
) -> None:
    """Trainer step time and tokens/s vs a plain forward+backward of the same actor and critic."""
    from trainer.bench.train_bench import run_train_bench

    try:
        result = run_train_bench([c.strip() for c in configs.split(",") if c.strip()], device)
    except ValueError as exc:
        raise TrainerError(str(exc)) from None
    if as_json:
        print(json.dumps(result, indent=2))
        return
    table = Table(title="rlguard bench train")
    for column in ("config", "params", "tokens", "step s", "raw fwd+bwd s", "tokens/s", "step / raw"):
        table.add_column(column)
    for name, row in result["configs"].items():
        table.add_row(
            name,
            f"{row['actor_parameters'] / 1e6:.1f}M",
            str(row["batch_tokens"]),
            f"{row['step_s']:.3f}",
            f"{row['raw_fwd_bwd_s']:.3f}",
            f"{row['tokens_per_s']:.0f}",
            f"{row['step_vs_raw_fwd_bwd']:.2f}",
        )
    console.print(table)


def bench_learn(
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Seeds per algorithm and horizon"),
    out: Path = typer.Option(Path("runs/bench-learn"), "--out", help="Where curves and results go"),
    budget_tokens: int | None = typer.Option(
        None, "--budget-tokens", min=1000, help="Environment tokens per long-horizon run (default 1.5M)"
    ),
) -> None:
    """PPO+critic vs GRPO on long (compacted, multi-turn) and short synthetic horizons."""
    from trainer.bench.learn_bench import run_learn_bench

    result = run_learn_bench(seeds=seeds, out_dir=out, budget_tokens=budget_tokens)
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    table = Table(title=f"rlguard bench learn ({seeds} seeds)")
    for column in (
        "algorithm",
        "long: final",
        "long: mean in training",
        "short: final",
        "short: mean in training",
    ):
        table.add_column(column)
    for algo in ("ppo", "grpo"):
        table.add_row(
            algo,
            *(
                f"{result.get(f'{algo}_{horizon}{suffix}', float('nan')):.3f}"
                for horizon in ("long", "short")
                for suffix in ("", "_auc")
            ),
        )
    console.print(table)
    for path in result.get("plots", []):
        console.print(str(path))


def bench_distill(
    as_json: bool = typer.Option(False, "--json", help="Print JSON"),
    distill_tokens: int | None = typer.Option(None, "--distill-tokens", min=1000, help="Student's budget"),
    teacher_tokens: int | None = typer.Option(
        None, "--teacher-tokens", min=1000, help="Long teacher's budget"
    ),
) -> None:
    """Two PPO experts (short / long horizon) distilled into one fresh student (on-policy, reverse KL)."""
    from trainer.bench.distill_bench import DistillParams, run_distill_bench

    params = DistillParams()
    if distill_tokens is not None:
        params = replace(params, distill_budget=distill_tokens)
    if teacher_tokens is not None:
        params = replace(params, teacher_budget={**params.teacher_budget, "long": teacher_tokens})
    result = run_distill_bench(params)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    table = Table(title="rlguard bench distill")
    for column in ("group", "teacher", "student before", "student after", "after / teacher", "reverse KL"):
        table.add_column(column)
    for group in result["teacher_success"]:
        table.add_row(
            group,
            f"{result['teacher_success'][group]:.3f}",
            f"{result['student_success_before'][group]:.3f}",
            f"{result['student_success_after'][group]:.3f}",
            f"{result['student_vs_teacher'][group]:.2f}",
            f"{result['reverse_kl_by_group_before'][group]:.3f} -> "
            f"{result['reverse_kl_by_group_after'][group]:.3f}",
        )
    console.print(table)
    console.print(
        f"reverse KL {result['reverse_kl_before']:.3f} -> {result['reverse_kl_after']:.3f} "
        f"({result['reverse_kl_reduction']:.1f}x); {result['seconds']:.0f} s"
    )


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this package's commands to the root app and its benchmarks to ``rlguard bench``."""
    app.command("plot")(plot)
    bench.command("train")(bench_train)
    bench.command("learn")(bench_learn)
    bench.command("distill")(bench_distill)
