"""``rlguard plot RUN_DIR``: draw a run's ``metrics.jsonl`` to PNG files beside it.

Two kinds of run directory hold a ``metrics.jsonl``: a training run (``rlguard train``: one object per
step with a ``step`` key and numeric metrics) and the learning benchmark (``rlguard bench learn``:
records that also carry ``run``, ``algo``, ``horizon`` and ``env_tokens``). A training run gets one
panel per numeric metric; the benchmark gets success against environment tokens per horizon, one
colour per algorithm (thin lines: seeds, thick: their mean), plus its training diagnostics.
"""

import json
import math
from collections import defaultdict
from pathlib import Path

from trainer.errors import TrainerError

METRICS_FILE = "metrics.jsonl"
BENCH_KEYS = {"run", "algo", "horizon", "seed", "env_tokens"}
DIAGNOSTICS = ("entropy", "explained_variance", "value_loss", "clip_fraction", "subtrajectories_per_episode")
COLOURS = {"ppo": "tab:blue", "grpo": "tab:orange"}


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


def plot_run(run_dir: Path) -> list[Path]:
    """Write the run's PNG files into ``run_dir`` and return their paths."""
    run_dir = Path(run_dir)
    records = read_records(run_dir)
    if all(record.keys() >= BENCH_KEYS for record in records):
        return [_plot_learning_curves(run_dir, records), _plot_bench_diagnostics(run_dir, records)]
    return [_plot_metrics(run_dir, records)]


def _plot_metrics(run_dir: Path, records: list[dict]) -> Path:
    """One panel per numeric metric against ``step`` (or the record index when there is none)."""
    names = sorted({k for r in records for k, v in r.items() if k != "step" and _is_number(v)})
    if not names:
        raise TrainerError(f"{run_dir / METRICS_FILE} has no numeric metric to plot")
    plt = _pyplot()
    rows, cols = _grid(len(names))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        points = [(r.get("step", i), r[name]) for i, r in enumerate(records) if _is_number(r.get(name))]
        ax.plot([p[0] for p in points], [p[1] for p in points], lw=1.2)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.tight_layout()
    out = run_dir / "metrics.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


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
    fig.tight_layout()
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
    fig.tight_layout()
    out = run_dir / "diagnostics.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
