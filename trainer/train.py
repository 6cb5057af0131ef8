"""A training run over the trajectory store: read, train, checkpoint, commit, reload the policy.

``RUN_DIR`` holds ``checkpoints/step-NNNNNN/``, ``metrics.jsonl`` and ``tensorboard/``; the store
holds which checkpoint is committed (``training_steps``), so a run resumes from the database's word,
never from whatever happens to be on disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store.migrate import upgrade
from store.repository import Store
from trainer.checkpoint import load_checkpoint, save_checkpoint
from trainer.data import load_step_data, shard_for_rank, split_small_groups
from trainer.errors import TrainerError
from trainer.metrics import MetricsLog
from trainer.ppo import PPOTrainer
from trainer.reload import WeightSync, make_weight_sync
from trainer.runtime import Runtime, init_runtime
from trainer.settings import TrainerSettings
from trainer.staleness import apply_staleness


def resolve_model(model: str | Path) -> Path:
    """A local HF model directory (no hub), checked before any weights are loaded."""
    path = Path(model)
    if not (path / "config.json").is_file():
        raise TrainerError(f"{path} is not a HF model directory (no config.json)")
    return path


@dataclass
class StepResult:
    step: int
    checkpoint: Path
    metrics: dict[str, float]


class TrainingRun:
    """One run's trainer bound to a store, a run directory and (optionally) a policy server."""

    def __init__(
        self,
        run_dir: Path,
        model_path: Path,
        database_url: str,
        settings: TrainerSettings,
        runtime: Runtime | None = None,
        policy_url: str | None = None,
        run_name: str | None = None,
        tensorboard: bool = True,
        weight_sync: WeightSync | None = None,
        policy_token: str | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.model_path = Path(model_path)
        self.settings = settings
        self.runtime = runtime or init_runtime(settings.parallel)
        self.policy_url = policy_url
        self.run_name = run_name or str(self.run_dir.resolve())[-200:]
        if self.runtime.is_main:
            upgrade(database_url)
        self.runtime.barrier()
        self.store = Store.from_url(database_url)
        committed = self.store.latest_training_step(self.run_name)
        if committed is not None:
            self.trainer = load_checkpoint(
                Path(committed.checkpoint_path), settings, self.runtime, reference_path=self.model_path
            )
        else:
            self.trainer = PPOTrainer.from_pretrained(self.model_path, settings, self.runtime)
        self.metrics = MetricsLog(self.run_dir, tensorboard) if self.runtime.is_main else None
        self.read_episodes = 0
        self.dropped_episodes = 0
        self.masked_tokens = 0
        self.unusable_episodes = 0
        self._weight_sync = weight_sync
        #: The policy server's control token (``rollout.control``), sent with every weight push.
        self.policy_token = policy_token

    def step(
        self,
        max_episodes: int,
        episode_ids: list[str] | None = None,
        run: str | None = None,
        policy_versions: list[str] | None = None,
    ) -> StepResult | None:
        """Train on up to ``max_episodes`` unconsumed episodes (of ``episode_ids``, ``run`` and
        ``policy_versions`` when given); None when there is nothing to train on anywhere (or all of
        it was too stale and got dropped). Under torchrun a rank whose share is empty still takes
        part (padding micro-batches), so the step and its data's consumption happen on every rank."""
        data = load_step_data(
            self.store,
            max_episodes,
            self.settings.max_sequence_tokens,
            episode_ids,
            run,
            policy_versions,
            mark_unusable=self.runtime.is_main,
            intercept_penalty=self.settings.intercept_penalty,
        )
        self.unusable_episodes += len(data.unusable)
        staleness = apply_staleness(
            data.samples, self.trainer.policy_version, self.settings.max_staleness, self.settings.stale_mode
        )
        if staleness.dropped and self.runtime.is_main:
            self.store.drop_sub_trajectories(
                [s.record_id for s in staleness.dropped if s.record_id is not None]
            )
        self.dropped_episodes += int(staleness.metrics["data/dropped_episodes"])
        self.masked_tokens += int(staleness.metrics["data/masked_tokens"])
        self.read_episodes += data.episodes
        # Critic-free estimators use group baselines: a task group stays on one rank (GAE needs episodes).
        by_group = not self.trainer.uses_critic
        kept = staleness.kept
        if self.trainer.needs_groups:
            kept, small = split_small_groups(kept, self.settings.min_group_size, data.episode_names)
            if small and self.runtime.is_main:
                self.store.mark_unusable(
                    {
                        name: f"its task group had under {self.settings.min_group_size} usable episodes"
                        for name in small
                    }
                )
            staleness.metrics["data/small_group_episodes"] = float(len(small))
        kept_ids = [s.record_id for s in kept if s.record_id is not None]
        mine = shard_for_rank(kept, self.runtime.rank, self.runtime.world_size, by_group)
        if self.runtime.all_reduce_max(int(bool(mine))) == 0:
            return None
        staleness.metrics["data/unusable_episodes"] = float(len(data.unusable))
        staleness.metrics["data/decoyed_calls_per_episode"] = data.decoyed_calls / max(data.episodes, 1)
        metrics = self.trainer.train_step(mine) | staleness.metrics
        step = self.trainer.step
        checkpoint = save_checkpoint(
            self.trainer, self.run_dir / "checkpoints" / f"step-{step:06d}", tokenizer_source=self.model_path
        )
        if self.runtime.is_main:
            self.store.commit_training_step(
                self.run_name,
                step,
                str(self.trainer.policy_version),
                str(checkpoint),
                kept_ids,
                metrics,
            )
        self.runtime.barrier()
        if self.policy_url and self.runtime.is_main:
            self.weight_sync().push(checkpoint / "actor", str(self.trainer.policy_version))
        if self.metrics is not None:
            self.metrics.log(step, metrics)
        return StepResult(step, checkpoint, metrics)

    def weight_sync(self) -> WeightSync:
        """How new weights reach the policy server (``reload_protocol``), built on first use."""
        if self._weight_sync is None:
            assert self.policy_url is not None
            self._weight_sync = make_weight_sync(
                self.settings.reload_protocol,
                self.policy_url,
                self.settings.reload_timeout_s,
                initial_version=str(self.trainer.policy_version),
                token=self.policy_token,
            )
        return self._weight_sync

    @property
    def policy_checkpoint(self) -> Path:
        """The HF directory of the newest committed policy (the base model before the first step)."""
        committed = self.store.latest_training_step(self.run_name)
        return Path(committed.checkpoint_path) / "actor" if committed else self.model_path

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        self.store.close()


def run_ppo_update(
    database_url: str,
    model_path: str | Path,
    out_dir: str | Path,
    max_episodes: int = 64,
    policy_url: str | None = None,
    settings: TrainerSettings | None = None,
) -> dict[str, Any]:
    """One PPO update from the store on ``model_path`` (``tiny`` for the local tiny model), for the demo.

    Returns the step's metrics plus ``step``, ``checkpoint`` (the HF policy directory) and
    ``sub_trajectories``; ``{"step": None, ...}`` when the store holds nothing to train on.
    """
    # One update that moves the policy (the demo shows it): no critic-only warm-up step.
    settings = settings or TrainerSettings(algo="ppo", actor_lr=1e-5, critic_lr=1e-4, critic_warmup_steps=0)
    run = TrainingRun(
        Path(out_dir),
        resolve_model(model_path),
        database_url,
        settings,
        init_runtime(device="cpu"),
        policy_url=policy_url,
        tensorboard=False,
    )
    try:
        result = run.step(max_episodes)
    finally:
        run.close()
    if result is None:
        return {"step": None, "checkpoint": None, "sub_trajectories": 0}
    return {
        **result.metrics,
        "step": result.step,
        "checkpoint": str(result.checkpoint / "actor"),
        "sub_trajectories": int(result.metrics["data/sub_trajectories"]),
    }
