"""The learning benchmark end to end at a tiny budget, and ``plot_run`` on both kinds of run directory."""

import json
from pathlib import Path

import pytest
import torch

from trainer.bench.learn_bench import (
    GRUNet,
    HyperParams,
    learning_auc,
    run_learn_bench,
    score_tokens,
    tokens_to_success,
    train_one,
)
from trainer.bench.synthetic_env import LONG, SHORT, rollout, sample_tasks
from trainer.errors import TrainerError
from trainer.plot import plot_run


def test_rollout_logprobs_match_rescoring() -> None:
    """PPO's ratio starts at 1 only if training re-scores tokens exactly as they were sampled."""
    torch.manual_seed(0)
    actor = GRUNet(LONG.vocab_size, LONG.vocab_size, 16, 32)
    generator = torch.Generator().manual_seed(0)
    ro = rollout(actor, sample_tasks(LONG, 64, generator), LONG, generator)
    with torch.no_grad():
        logprobs, _ = score_tokens(actor, ro.tokens, LONG)
    mask = ro.action_mask.bool()
    assert torch.allclose(logprobs[mask], ro.logprobs[mask], atol=1e-5)


def test_ppo_learns_the_short_task_from_scratch() -> None:
    torch.set_num_threads(1)
    result = train_one("ppo", "short", seed=0, budget_tokens=25_000, eval_episodes=512)
    chance = 1 / SHORT.num_keys
    assert result.env_tokens >= 25_000
    assert result.curve[0]["success"] < 0.5
    assert result.final_success > chance + 0.35, result.final_success


def test_bench_writes_results_metrics_and_pngs(tmp_path: Path) -> None:
    summary = run_learn_bench(
        seeds=1, out_dir=tmp_path, budget_tokens=20_000, workers=1, hp=HyperParams(tasks_per_iter=8, epochs=1)
    )
    for key in ("ppo_long", "grpo_long", "ppo_short", "grpo_short"):
        assert 0.0 <= summary[key] <= 1.0
        assert 0.0 <= summary[f"{key}_auc"] <= 1.0
    assert summary["seeds"] == 1
    assert {(r["algo"], r["horizon"]) for r in summary["per_seed"]} == {
        (a, h) for a in ("ppo", "grpo") for h in ("long", "short")
    }
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["ppo_long"] == summary["ppo_long"]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {r["run"] for r in records} == {"ppo_long_s0", "grpo_long_s0", "ppo_short_s0", "grpo_short_s0"}
    for name in ("learning_curves.png", "diagnostics.png"):
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_tokens_to_success_uses_a_moving_average() -> None:
    curve = [
        {"success": s, "env_tokens": 100 * (i + 1)}
        for i, s in enumerate([0.2, 1.0, 0.2, 0.9, 0.9, 0.9, 0.95, 1.0])
    ]
    assert tokens_to_success(curve, threshold=0.9, window=3) == 600
    assert tokens_to_success(curve, threshold=0.99, window=3) is None
    assert learning_auc(curve) == sum(r["success"] for r in curve) / len(curve)


def test_plot_run_draws_a_training_run(tmp_path: Path) -> None:
    lines = [
        {"step": i, "loss/policy": 1.0 / (i + 1), "kl": 0.01 * i, "note": "x", "ev": None} for i in range(20)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    [png] = plot_run(tmp_path)
    assert png == tmp_path / "metrics.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_run_rejects_missing_or_broken_metrics(tmp_path: Path) -> None:
    with pytest.raises(TrainerError, match=r"no metrics\.jsonl"):
        plot_run(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\nnot json\n')
    with pytest.raises(TrainerError, match=r"metrics\.jsonl:2"):
        plot_run(tmp_path)
