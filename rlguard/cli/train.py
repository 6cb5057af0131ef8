"""``rlguard train`` (learn from the store's episodes) and ``rlguard plot`` (a run's curves)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import typer

from rlguard.cli.output import bar, line
from rlguard.cli.policy import MODEL_HELP
from rlguard.cli.serve import DATABASE_URL_HELP
from rlguard.settings import get_settings
from trainer.errors import TrainerError

INTERCEPT_PENALTY_HELP = (
    "Reward taken off an episode per call answered with a decoy (default 0; see rlguard bench decoy)"
)


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
    from rollout.tinymodel import resolve_model_name
    from trainer.train import resolve_model

    named = {
        name: str(resolve_model(resolve_model_name(path, get_settings().state_dir)))
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


def trainer_settings(algo: str, overrides: dict[str, Any]) -> Any:
    """The trainer section of the settings, with the command line's explicit values on top
    (``--algo`` is checked against the registered algorithms, ``trainer.advantages.ALGORITHMS``)."""
    from pydantic import ValidationError

    configured = get_settings().trainer
    values = {k: v for k, v in overrides.items() if v is not None}
    try:
        return type(configured).model_validate(configured.model_dump() | {"algo": algo, **values})
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "--" + "-".join(str(part) for part in first["loc"]).replace("_", "-")
        message = str(first["msg"]).removeprefix("Value error, ")  # a validator's own words
        raise TrainerError(f"bad value for {name}: {message}") from None


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
    algo: str = typer.Option(
        "ppo", "--algo", help="ppo (GAE and a learned critic), grpo, rloo, reinforce_pp or opd"
    ),
    model: str = typer.Option("tiny", "--model", help=MODEL_HELP),
    steps: int = typer.Option(1, "--steps", min=1, help="Training steps to run"),
    out: Path = typer.Option(Path("runs/train"), "--out", help="Run directory (checkpoints, metrics)"),
    policy_url: str | None = typer.Option(
        None, "--policy-url", help="A policy server to reload after each step"
    ),
    database_url: str | None = typer.Option(None, "--database-url", help=DATABASE_URL_HELP),
    episodes_per_step: int = typer.Option(
        64, "--episodes-per-step", min=1, help="Episodes a step trains on, at most"
    ),
    wait_s: float = typer.Option(
        0.0, "--wait-s", min=0, help="Wait this long for new episodes before stopping"
    ),
    actor_lr: float | None = typer.Option(None, "--actor-lr", help="The policy's learning rate"),
    critic_lr: float | None = typer.Option(None, "--critic-lr", help="The critic's learning rate (ppo)"),
    kl_coef: float | None = typer.Option(
        None, "--kl-coef", help="Weight of the KL penalty to the reference policy"
    ),
    ppo_epochs: int | None = typer.Option(None, "--ppo-epochs", help="Passes over a step's data"),
    intercept_penalty: float | None = typer.Option(
        None, "--intercept-penalty", min=0, help=INTERCEPT_PENALTY_HELP
    ),
    device: str | None = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)"),
    teacher: list[str] = typer.Option(
        [], "--teacher", metavar="NAME=PATH", help="opd: NAME=PATH of a teacher (repeatable)"
    ),
    route: list[str] = typer.Option(
        [], "--route", metavar="GROUP=NAME", help="opd: GROUP=NAME, the teacher of a task group (repeatable)"
    ),
    reward_weight: float | None = typer.Option(
        None, "--reward-weight", help="opd: weight of the task reward"
    ),
) -> None:
    """Train on the store's unconsumed episodes.

    Each step writes a checkpoint; the policy server at --policy-url then reloads it.

    With --algo opd, teachers are distilled into the policy: each sample's tokens are scored by the
    teacher its task group (the suite) is routed to, and an action token's advantage is the
    teacher's logprob minus the student's (reverse KL), plus --reward-weight times the task reward.

    Under torchrun --nproc_per_node N -m rlguard train ... it runs data-parallel (DDP, or FSDP2 with
    RLGUARD_TRAINER__PARALLEL=fsdp).
    """
    from rlguard.cli.policy import check_model
    from rlguard.cli.resources import database_url as resolved_url
    from store.repository import Store
    from trainer.runtime import init_runtime, shutdown_runtime
    from trainer.train import TrainingRun, resolve_model

    if algo == "opd" and not teacher:
        raise TrainerError("--algo opd needs at least one --teacher NAME=PATH")
    settings = trainer_settings(
        algo,
        {
            "actor_lr": actor_lr,
            "critic_lr": critic_lr,
            "kl_coef": kl_coef,
            "ppo_epochs": ppo_epochs,
            "intercept_penalty": intercept_penalty,
        }
        | teacher_settings(teacher, route, reward_weight),
    )
    url = resolved_url(get_settings(), database_url)
    Store.open(url, must_exist=True).close()
    model_dir = resolve_model(check_model(model))
    runtime = init_runtime(settings.parallel, device=device)
    token = get_settings().rollout.policy.control_token  # the policy server's, shared with its trainer
    run = TrainingRun(
        out,
        model_dir,
        url,
        settings,
        runtime,
        policy_url=policy_url,
        policy_token=token.get_secret_value() if token is not None else None,
    )
    done = 0
    progress = bar(info=True) if runtime.is_main else None
    try:
        with progress or contextlib.nullcontext():
            task = progress.add_task(f"train {algo}", total=steps, info="") if progress else None
            deadline = time.monotonic() + wait_s
            while done < steps:
                if progress is not None:
                    progress.update(task, description=f"train {algo}: step {done + 1}")
                result = run.step(episodes_per_step)
                if result is None:
                    if time.monotonic() >= deadline:
                        break
                    if progress is not None:
                        progress.update(task, description=f"train {algo}: waiting for episodes")
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
            raise TrainerError(
                f"the store holds no unconsumed, ended episodes to train on ({_redacted(url)})"
            )
        line(f"{done} step(s); metrics in {out / 'metrics.jsonl'}; policy {run.policy_checkpoint}")


def _redacted(url: str) -> str:
    from store.engine import redact

    return redact(url)


def plot(run_dir: Path = typer.Argument(..., help="A run directory holding metrics.jsonl")) -> None:
    """Draw a run's curves to PNG files beside it.

    One panel per metric, reward first, and a histogram of its episodes' rewards from the store;
    learning curves for a bench learn run.
    """
    from trainer.plot import plot_run

    for path in plot_run(run_dir, get_settings().resolved_database_url):
        line(str(path))


def register(app: typer.Typer) -> None:
    """Add ``rlguard train`` and ``rlguard plot``."""
    app.command("train")(train)
    app.command("plot")(plot)
