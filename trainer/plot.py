"""``rlguard plot RUN_DIR``: draw a run's ``metrics.jsonl`` to PNG files beside it.

Two kinds of run directory hold a ``metrics.jsonl``: a training run (``rlguard train``: one object per
step with a ``step`` key and numeric metrics) and the learning benchmark (``rlguard bench learn``:
records that also carry ``run``, ``algo``, ``horizon`` and ``env_tokens``). A training run gets one
panel per numeric metric, the reward ones first, preceded (when the store is given) by a histogram
of the rewards of the episodes the run trained on; short runs get markers, so a one-step run shows
its points instead of empty panels. The benchmark gets success against environment tokens per
horizon, one colour per algorithm (thin lines: seeds, thick: their mean), plus its training
diagnostics. The decoy benchmark
(``rlguard bench decoy``: records with ``regime``, ``seed`` and ``env_tokens``) gets one PNG per
metric, one colour per regime (thin lines: seeds, thick: their mean). Every figure is captioned
with the host's load average when drawn.
"""

import json
import math
import os
import socket
from collections import defaultdict
from pathlib import Path

from trainer.errors import TrainerError

METRICS_FILE = "metrics.jsonl"
BENCH_KEYS = {"run", "algo", "horizon", "seed", "env_tokens"}
REGIME_KEYS = {"run", "regime", "seed", "env_tokens"}
REGIME_METRICS = (
    "honest_success",
    "cheat_rate",
    "cheat_attempts",
    "undetected_cheat_rate",
    "evasive_share",
    "evasive_attempts",
    "early_end_rate",
    "reward_var",
    "approx_kl",
    "success",
)
DIAGNOSTICS = ("entropy", "explained_variance", "value_loss", "clip_fraction", "subtrajectories_per_episode")
COLOURS = {"ppo": "tab:blue", "grpo": "tab:orange"}
MARKERS_UP_TO = 20  # points per curve; fewer get markers (and a single point its value)


def read_records(run_dir: Path) -> list[dict]:
    """Parse ``RUN_DIR/metrics.jsonl``; a clear error for a missing file or a bad line."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise TrainerError(f"no {METRICS_FILE} in {run_dir}")
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrainerError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise TrainerError(f"{path}:{number}: expected a JSON object")
        records.append(record)
    if not records:
        raise TrainerError(f"{path} holds no records")
    return records


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(count: int, columns: int = 3) -> tuple[int, int]:
    cols = min(columns, count)
    return math.ceil(count / cols), cols


def plot_run(run_dir: Path, database_url: str | None = None) -> list[Path]:
    """Write the run's PNG files into ``run_dir`` and return their paths. ``database_url``: the store
    the run trained from, for the histogram of its episodes' rewards (left out when unreadable)."""
    run_dir = Path(run_dir)
    records = read_records(run_dir)
    if all(record.keys() >= BENCH_KEYS for record in records):
        return [_plot_learning_curves(run_dir, records), _plot_bench_diagnostics(run_dir, records)]
    if all(record.keys() >= REGIME_KEYS for record in records):
        return _plot_regimes(run_dir, records)
    rewards = episode_rewards(run_dir, database_url) if database_url else []
    return [_plot_metrics(run_dir, records, rewards)]


def episode_rewards(run_dir: Path, database_url: str) -> list[float]:
    """Rewards of the episodes a training run consumed (its steps in ``training_steps``, named by the
    run directory as ``TrainingRun`` names them); empty when the store has none or cannot be read."""
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    from store.errors import StoreError
    from store.models import EpisodeRow, SubTrajectoryRow, TrainingStepRow
    from store.repository import Store

    run_name = str(Path(run_dir).resolve())[-200:]
    try:
        store = Store.open(database_url, must_exist=True)
    except (StoreError, SQLAlchemyError):
        return []
    try:
        steps = select(TrainingStepRow.id).where(TrainingStepRow.run == run_name)
        episodes = select(SubTrajectoryRow.episode_id).where(SubTrajectoryRow.consumed_by_step.in_(steps))
        query = select(EpisodeRow.reward).where(EpisodeRow.id.in_(episodes), EpisodeRow.reward.is_not(None))
        with store.sessions() as session:
            return [float(r) for r in session.scalars(query)]
    except SQLAlchemyError:
        return []
    finally:
        store.close()


def _ordered(names: set[str]) -> list[str]:
    """Reward metrics first (what a person looks for), then the rest alphabetically."""
    return sorted(names, key=lambda n: (0 if "reward" in n else 1, n))


def _caption(fig) -> None:
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    fig.text(
        0.995, 0.003, f"drawn on {socket.gethostname()}: load average {load} ({os.cpu_count()} CPUs)",
        ha="right", va="bottom", fontsize=7, color="0.4",
    )  # fmt: skip


def _plot_metrics(run_dir: Path, records: list[dict], rewards: list[float] | None = None) -> Path:
    fig = metrics_figure(records, rewards, source=run_dir / METRICS_FILE)
    out = run_dir / "metrics.png"
    fig.savefig(out, dpi=110)
    _pyplot().close(fig)
    return out


def metrics_figure(records: list[dict], rewards: list[float] | None = None, source: object = "the records"):
    """A reward histogram (when ``rewards``), then one panel per numeric metric against ``step``."""
    names = _ordered({k for r in records for k, v in r.items() if k != "step" and _is_number(v)})
    if not names:
        raise TrainerError(f"{source} has no numeric metric to plot")
    plt = _pyplot()
    panels = len(names) + (1 if rewards else 0)
    rows, cols = _grid(panels)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows + 0.3), squeeze=False)
    flat = list(axes.flat)
    if rewards:
        ax = flat.pop(0)
        ax.hist(rewards, bins=min(20, max(5, len(set(rewards)))), color="tab:green", edgecolor="white")
        ax.set_title(f"reward per episode ({len(rewards)} episodes)", fontsize=10)
        ax.set_xlabel("reward", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax, name in zip(flat, names, strict=False):
        points = [(r.get("step", i), r[name]) for i, r in enumerate(records) if _is_number(r.get(name))]
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        marker = "o" if len(points) <= MARKERS_UP_TO else None
        ax.plot(xs, ys, lw=1.2, marker=marker, ms=5, color="tab:green" if "reward" in name else None)
        if len(points) == 1:
            ax.annotate(f"{ys[0]:.4g}", (xs[0], ys[0]), textcoords="offset points", xytext=(6, 6), fontsize=8)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in flat[len(names) :]:
        ax.axis("off")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    _caption(fig)
    return fig


def _by_run(records: list[dict]) -> dict[tuple[str, str], dict[int, list[dict]]]:
    """``{(horizon, algo): {seed: [records in step order]}}``."""
    runs: dict[tuple[str, str], dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        runs[(record["horizon"], record["algo"])][record["seed"]].append(record)
    for seeds in runs.values():
        for curve in seeds.values():
            curve.sort(key=lambda r: r.get("step", 0))
    return runs


def _mean_curve(curves: list[list[dict]], key: str) -> tuple[list[float], list[float]]:
    """Mean over seeds, iteration by iteration, up to the shortest seed (budgets are equal)."""
    length = min(len(c) for c in curves)
    xs, ys = [], []
    for i in range(length):
        values = [c[i][key] for c in curves if _is_number(c[i].get(key))]
        if values:
            xs.append(sum(c[i]["env_tokens"] for c in curves) / len(curves))
            ys.append(sum(values) / len(values))
    return xs, ys


def _plot_learning_curves(run_dir: Path, records: list[dict]) -> Path:
    plt = _pyplot()
    runs = _by_run(records)
    horizons = sorted({h for h, _ in runs})
    fig, axes = plt.subplots(1, len(horizons), figsize=(6 * len(horizons), 4), squeeze=False)
    for ax, horizon in zip(axes.flat, horizons, strict=True):
        for (h, algo), seeds in sorted(runs.items()):
            if h != horizon:
                continue
            colour = COLOURS.get(algo)
            for curve in seeds.values():
                ax.plot(
                    [r["env_tokens"] for r in curve],
                    [r["success"] for r in curve],
                    color=colour,
                    lw=0.6,
                    alpha=0.35,
                )
            xs, ys = _mean_curve(list(seeds.values()), "success")
            ax.plot(
                xs,
                ys,
                color=colour,
                lw=2.2,
                label=f"{algo} (mean over {len(seeds)} seed{'s' if len(seeds) > 1 else ''})",
            )
        ax.set_title(f"{horizon} horizon", fontsize=11)
        ax.set_xlabel("environment tokens")
        ax.set_ylabel("success (training batch)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9, loc="lower right")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    _caption(fig)
    out = run_dir / "learning_curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _plot_bench_diagnostics(run_dir: Path, records: list[dict]) -> Path:
    plt = _pyplot()
    runs = _by_run(records)
    horizons = sorted({h for h, _ in runs})
    names = [n for n in DIAGNOSTICS if any(_is_number(r.get(n)) for r in records)]
    fig, axes = plt.subplots(
        len(horizons), len(names), figsize=(3.6 * len(names), 3 * len(horizons)), squeeze=False
    )
    for row, horizon in enumerate(horizons):
        for col, name in enumerate(names):
            ax = axes[row][col]
            for (h, algo), seeds in sorted(runs.items()):
                if h == horizon:
                    xs, ys = _mean_curve(list(seeds.values()), name)
                    if xs:
                        ax.plot(xs, ys, color=COLOURS.get(algo), lw=1.4, label=algo)
            ax.set_title(f"{horizon}: {name}", fontsize=9)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    _caption(fig)
    out = run_dir / "diagnostics.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _plot_regimes(run_dir: Path, records: list[dict]) -> list[Path]:
    """One PNG per metric against environment tokens: a colour per regime, thin seeds, thick mean."""
    plt = _pyplot()
    runs: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        runs[record["regime"]][record["seed"]].append(record)
    order = list(dict.fromkeys(record["regime"] for record in records))
    colours = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(order)}
    paths = []
    for name in [m for m in REGIME_METRICS if any(_is_number(r.get(m)) for r in records)]:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        for regime in order:
            seeds = runs[regime]
            for curve in seeds.values():
                curve.sort(key=lambda r: r.get("step", 0))
                points = [(r["env_tokens"], r[name]) for r in curve if _is_number(r.get(name))]
                ax.plot(
                    [p[0] for p in points], [p[1] for p in points], color=colours[regime], lw=0.5, alpha=0.3
                )
            xs, ys = _mean_curve(list(seeds.values()), name)
            ax.plot(xs, ys, color=colours[regime], lw=2, label=f"{regime} ({len(seeds)} seeds)")
        ax.set_title(name, fontsize=11)
        ax.set_xlabel("environment tokens")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        out = run_dir / f"{name}.png"
        fig.savefig(out, dpi=100)
        plt.close(fig)
        paths.append(out)
    return paths
