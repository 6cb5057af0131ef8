"""``rlguard bench distill``: two experts merged into one student by on-policy distillation.

Why: the trainer's ``--algo opd`` claims that a student sampling its own episodes, each token scored
by the expert of the task's group, learns every expert's skill at once from a dense per-token
signal (the reverse KL), with no critic and no reward. This benchmark checks that on the learning
benchmark's environment (``trainer.bench.synthetic_env``), where it runs in minutes on a CPU:

1. two teachers are trained with PPO (``trainer.bench.learn_bench``), one per task group: ``short``
   (one turn: read the key, answer it) and ``long`` (several turns, compaction, the key carried
   through summaries);
2. a fresh student of the same architecture samples episodes of both groups; each episode's tokens
   are scored by its group's teacher (teacher-forced on the student's tokens), and the advantage of
   every action token is ``log pi_teacher - log pi_student`` (the ``opd`` estimator of
   ``trainer.advantages``), trained with the trainer's clipped policy loss;
3. success per group (sampling, 1,024 fresh tasks) and the exact per-token reverse KL
   ``KL(student || teacher)`` (over the legal actions, on the student's own episodes) are measured
   before and after.

Targets (issue 14): the student reaches >= 90% of each teacher's success on its group, the reverse
KL falls at least 5x, all within 10 minutes.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from trainer.advantages import AdvantageBatch, AdvantageConfig, opd_estimator
from trainer.bench.learn_bench import EVAL_EPISODES, GRUNet, HyperParams, evaluate, score_tokens, train_policy
from trainer.bench.synthetic_env import HORIZONS, PAD, EnvConfig, Rollout, rollout, sample_tasks
from trainer.losses import compute_policy_loss
from trainer.rows import place_episode_rewards

GROUPS = ("short", "long")


@dataclass(frozen=True)
class DistillParams:
    """Teachers' PPO budgets (environment tokens) and the distillation's own settings."""

    teacher_budget: dict[str, int] = field(default_factory=lambda: {"short": 75_000, "long": 1_000_000})
    teacher_seed: int = 0
    student_seed: int = 1
    distill_budget: int = 300_000  # environment tokens the student samples, both groups together
    tasks_per_group: int = 64
    lr: float = 3e-3
    epochs: int = 2
    minibatches: int = 2
    clip: float = 0.2
    reward_weight: float = 0.0
    eval_episodes: int = EVAL_EPISODES
    groups: tuple[str, ...] = GROUPS


def _teacher_job(job: tuple[str, int, int]) -> tuple[str, dict[str, torch.Tensor], float, float]:
    torch.set_num_threads(1)
    group, seed, budget = job
    actor, result = train_policy("ppo", group, seed, budget)
    return group, actor.state_dict(), result.final_success, result.seconds


def train_teachers(params: DistillParams, workers: int = 2) -> tuple[dict[str, GRUNet], dict[str, float]]:
    """One PPO teacher per group, trained in parallel processes; (teachers, their training seconds)."""
    hp = HyperParams()
    jobs = [(g, params.teacher_seed, params.teacher_budget[g]) for g in params.groups]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        done = list(pool.map(_teacher_job, jobs))
    teachers, seconds = {}, {}
    for group, state, _, spent in done:
        net = GRUNet(HORIZONS[group].vocab_size, HORIZONS[group].vocab_size, hp.embed, hp.hidden)
        net.load_state_dict(state)
        teachers[group], seconds[group] = net.eval(), spent
    return teachers, seconds


@torch.no_grad()
def exact_reverse_kl(student: GRUNet, teacher: nn.Module, ro: Rollout, config: EnvConfig) -> float:
    """Mean over the action tokens of ``KL(pi_student(.|s) || pi_teacher(.|s))`` (legal actions)."""
    _, student_logits = score_tokens(student, ro.tokens, config)
    _, teacher_logits = score_tokens(teacher, ro.tokens, config)
    log_s = torch.log_softmax(student_logits, dim=-1)
    log_t = torch.log_softmax(teacher_logits, dim=-1)
    per_token = (log_s.exp() * (log_s - log_t)).sum(-1)
    mask = ro.action_mask
    return float((per_token * mask).sum() / mask.sum())


def measure(student: GRUNet, teachers: dict[str, nn.Module], episodes: int, seed: int) -> dict[str, Any]:
    """Success per group and reverse KL to the group's teacher, on fresh tasks (sampling policy)."""
    success, kl = {}, {}
    for i, group in enumerate(teachers):
        config = HORIZONS[group]
        success[group] = evaluate(student, config, episodes, seed + i)
        generator = torch.Generator().manual_seed(seed + 100 + i)
        ro = rollout(student, sample_tasks(config, 256, generator), config, generator)
        kl[group] = exact_reverse_kl(student, teachers[group], ro, config)
    return {"success": success, "reverse_kl": kl, "reverse_kl_mean": sum(kl.values()) / len(kl)}


def _pad(x: torch.Tensor, width: int, value: float) -> torch.Tensor:
    return nn.functional.pad(x, (0, width - x.shape[1]), value=value)


def distill_step(
    student: GRUNet,
    teachers: dict[str, nn.Module],
    optimizer: torch.optim.Optimizer,
    params: DistillParams,
    generator: torch.Generator,
) -> tuple[int, float]:
    """Sample both groups, score with the routed teachers, one clipped update; (tokens, sampled KL)."""
    parts = []
    for index, group in enumerate(params.groups):
        config = HORIZONS[group]
        tasks = sample_tasks(config, params.tasks_per_group, generator)
        ro = rollout(
            student, tasks, config, generator, group_ids=torch.full((params.tasks_per_group,), index)
        )
        with torch.no_grad():
            teacher_lp, _ = score_tokens(teachers[group], ro.tokens, config)
        batch = AdvantageBatch(
            token_rewards=place_episode_rewards(ro.action_mask, ro.row_rewards, ro.is_last),
            action_mask=ro.action_mask,
            episode_ids=ro.episode_ids + index * params.tasks_per_group,
            group_ids=ro.group_ids,
            sub_index=ro.sub_index,
            is_last=ro.is_last,
            truncated=torch.zeros_like(ro.is_last),
            student_logprobs=ro.logprobs,
            teacher_logprobs=teacher_lp * ro.action_mask,
        )
        advantages, _ = opd_estimator(batch, AdvantageConfig(reward_weight=params.reward_weight))
        parts.append((ro, advantages))
    width = max(ro.tokens.shape[1] for ro, _ in parts)
    tokens = torch.cat([_pad(ro.tokens, width, PAD) for ro, _ in parts])
    mask = torch.cat([_pad(ro.action_mask, width, 0.0) for ro, _ in parts])
    old = torch.cat([_pad(ro.logprobs, width, 0.0) for ro, _ in parts])
    advantages = torch.cat([_pad(a, width, 0.0) for _, a in parts])
    # Both groups share the vocabulary and the typed action space, so one scoring config serves both.
    config = HORIZONS["long"]
    rows = tokens.shape[0]
    for _ in range(params.epochs):
        for chunk in torch.randperm(rows, generator=generator).chunk(params.minibatches):
            logprobs, _ = score_tokens(student, tokens[chunk], config)
            loss = compute_policy_loss(
                logprobs, old[chunk], advantages[chunk], mask[chunk], params.clip, params.clip, None
            ).loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(student.parameters(), 1.0)
            optimizer.step()
    sampled_kl = float((-advantages * mask).sum() / mask.sum())
    return sum(ro.num_tokens for ro, _ in parts), sampled_kl


def distill(teachers: dict[str, GRUNet], params: DistillParams) -> tuple[GRUNet, list[dict[str, float]]]:
    """A fresh student distilled from ``teachers`` until ``params.distill_budget`` tokens are spent."""
    torch.manual_seed(params.student_seed)
    generator = torch.Generator().manual_seed(params.student_seed)
    hp = HyperParams()
    vocab = HORIZONS["long"].vocab_size
    student = GRUNet(vocab, vocab, hp.embed, hp.hidden)
    optimizer = torch.optim.Adam(student.parameters(), lr=params.lr)
    spent, curve = 0, []
    while spent < params.distill_budget:
        tokens, sampled_kl = distill_step(student, teachers, optimizer, params, generator)
        spent += tokens
        curve.append({"env_tokens": spent, "sampled_reverse_kl": sampled_kl})
    return student, curve


def run_distill_bench(params: DistillParams | None = None) -> dict[str, Any]:
    """Teachers, the student before and after distillation, and the time it all took."""
    params = params or DistillParams()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small: one thread is several times faster (as bench learn)
    try:
        return _run(params)
    finally:
        torch.set_num_threads(threads)


def _run(params: DistillParams) -> dict[str, Any]:
    if not set(params.groups) <= set(params.teacher_budget) or not set(params.groups) <= set(HORIZONS):
        raise ValueError(f"groups {params.groups}: each needs a teacher budget and one of {sorted(HORIZONS)}")
    started = time.perf_counter()
    teachers, teacher_seconds = train_teachers(params)
    teacher_success = {
        g: evaluate(teachers[g], HORIZONS[g], params.eval_episodes, 20_000 + i)
        for i, g in enumerate(params.groups)
    }
    torch.manual_seed(params.student_seed)
    hp = HyperParams()
    vocab = HORIZONS["long"].vocab_size
    fresh = GRUNet(vocab, vocab, hp.embed, hp.hidden)
    before = measure(fresh, teachers, params.eval_episodes, 30_000)
    distill_started = time.perf_counter()
    student, curve = distill(teachers, params)
    distill_seconds = time.perf_counter() - distill_started
    after = measure(student, teachers, params.eval_episodes, 30_000)
    ratio = {g: after["success"][g] / max(teacher_success[g], 1e-9) for g in params.groups}
    return {
        "teacher_success": teacher_success,
        "student_success_before": before["success"],
        "student_success_after": after["success"],
        "student_vs_teacher": ratio,
        "reverse_kl_before": before["reverse_kl_mean"],
        "reverse_kl_after": after["reverse_kl_mean"],
        "reverse_kl_by_group_before": before["reverse_kl"],
        "reverse_kl_by_group_after": after["reverse_kl"],
        "reverse_kl_reduction": before["reverse_kl_mean"] / max(after["reverse_kl_mean"], 1e-9),
        "teacher_seconds": teacher_seconds,
        "distill_seconds": distill_seconds,
        "distill_env_tokens": curve[-1]["env_tokens"] if curve else 0,
        "seconds": time.perf_counter() - started,
        "params": asdict(params),
    }
