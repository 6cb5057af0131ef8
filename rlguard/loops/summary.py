"""What a loop reports, whatever its schedule: one record per training step and one for the run.

Both schedules hand :func:`summarize` the same things (each episode's status, reward and the policy
versions of its sub-trajectories; each step's record; the run's counters), so a sync and an async
run of the same spec are compared key for key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from trainer.train import TrainingRun


@dataclass(frozen=True)
class EpisodeOutcome:
    """What the loop keeps of a played episode."""

    status: str
    reward: float | None
    versions: list[list[str]]  # per sub-trajectory, the policy versions of its generated spans


@dataclass
class StepSummary:
    """One training step: what it trained on and how the policy moved."""

    step: int | None
    episodes: int
    policy_version: int
    mean_reward: float
    seconds: float  # since the loop's servers were up
    metrics: dict[str, float] = field(default_factory=dict)
    queue: int = 0  # episodes waiting in the async queue after the step


@dataclass
class LoopSummary:
    """The whole run: throughput, rewards, staleness and drops, and every step."""

    schedule: str
    episodes: int
    seconds: float
    busy_cpu_s: float
    steps: int
    trained_episodes: int
    policy_version: int
    mean_reward: float
    mean_staleness: float
    max_staleness: float
    dropped_episodes: int
    dropped_fraction: float
    mixed_version_episodes: int
    statuses: list[str]
    per_step: list[StepSummary]
    rollout_stats: dict[str, int] = field(default_factory=dict)  # async: queue and gate waits
    masked_tokens: int = 0  # action tokens older than max_staleness, kept out of the policy loss
    unusable_episodes: int = 0  # read by the trainer and marked unusable (infrastructure errors, ...)

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "episodes_per_s": self.episodes_per_s}


def summarize(
    schedule: str,
    outcomes: list[EpisodeOutcome],
    steps: list[StepSummary],
    run: TrainingRun,
    seconds: float,
    busy_cpu_s: float,
    rollout_stats: dict[str, int] | None = None,
) -> LoopSummary:
    """Throughput, rewards, staleness (token-weighted over steps) and drops over the whole run."""
    trained = [s for s in steps if s.step is not None]
    # staleness_mean is over the tokens the policy loss trains on (masked ones are not)
    tokens = [s.metrics.get("data/loss_tokens", s.metrics.get("data/action_tokens", 0.0)) for s in trained]
    staleness = [s.metrics.get("data/staleness_mean", 0.0) for s in trained]
    rewards = [o.reward for o in outcomes if o.reward is not None]
    return LoopSummary(
        schedule=schedule,
        episodes=len(outcomes),
        seconds=seconds,
        busy_cpu_s=busy_cpu_s,
        steps=len(trained),
        trained_episodes=int(sum(s.metrics.get("data/episodes", 0.0) for s in trained)),
        policy_version=run.trainer.policy_version,
        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
        mean_staleness=sum(t * s for t, s in zip(tokens, staleness, strict=True)) / max(sum(tokens), 1.0),
        max_staleness=max((s.metrics.get("data/staleness_max", 0.0) for s in trained), default=0.0),
        dropped_episodes=run.dropped_episodes,
        dropped_fraction=run.dropped_episodes / run.read_episodes if run.read_episodes else 0.0,
        mixed_version_episodes=sum(1 for o in outcomes if len({v for t in o.versions for v in t}) > 1),
        statuses=sorted({o.status for o in outcomes}),
        per_step=steps,
        rollout_stats=rollout_stats or {},
        masked_tokens=run.masked_tokens,
        unusable_episodes=run.unusable_episodes,
    )
