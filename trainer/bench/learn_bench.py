"""``rlguard bench learn``: PPO with a learned critic vs GRPO on long and short synthetic horizons.

Why: the trainer exists because critic-free methods are expected to fall behind on long, compacted
agent episodes (see ``trainer.bench.synthetic_env``) and to tie on short ones. This benchmark trains the
same tiny policy from scratch with both, on the same environment, the same budget of environment
tokens and the same hyper-parameters wherever the two algorithms share one, over several seeds, and
reports the final success of each. It uses the trainer's own advantage estimators and losses
(``trainer.advantages``, ``trainer.losses``), so it also exercises them end to end.

Model: an actor GRU (embedding 32, hidden 64) with a token head, and a critic of the same shape with
a scalar head: a *separate* trunk, as the trainer's critic is a separate model of the actor's
architecture. Each sub-trajectory is a fresh context (the recurrent state resets on ``BOS``).
"""

import json
import math
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from trainer.advantages import ALGORITHMS, AdvantageBatch, AdvantageConfig
from trainer.bench.synthetic_env import (
    BOS,
    HORIZONS,
    EnvConfig,
    Rollout,
    legal_action_mask,
    rollout,
    sample_tasks,
)
from trainer.errors import TrainerError
from trainer.losses import (
    compute_entropy_bonus,
    compute_policy_loss,
    compute_value_loss,
    explained_variance,
)
from trainer.masked import masked_mean, masked_whiten
from trainer.rows import place_episode_rewards

# The two algorithms the benchmark compares: a learned critic against a group baseline.
BENCH_ALGORITHMS = ("ppo", "grpo")
DEFAULT_SEEDS = 3
DEFAULT_LONG_BUDGET = 1_500_000
SHORT_BUDGET_FRACTION = 0.05
EVAL_EPISODES = 1024
NEG_INF = -1e9


@dataclass(frozen=True)
class HyperParams:
    """One setting for both algorithms; ``vf_coef``, ``lam`` and whitening only matter to PPO."""

    tasks_per_iter: int = 32
    group_size: int = 8
    lr: float = 3e-3
    epochs: int = 4
    minibatches: int = 4
    clip_low: float = 0.2
    clip_high: float = 0.2
    clip_ratio_c: float = 3.0
    entropy_coef: float = 0.01
    vf_coef: float = 0.5
    value_clip: float = 0.2
    gamma: float = 1.0
    lam: float = 0.95
    critic_lam: float | None = None  # None: lam (the setting the numbers were measured with)
    chain_subtrajectories: bool = False  # per-row bootstrapping, as measured; True: the trainer's default
    max_grad_norm: float = 1.0
    embed: int = 32
    hidden: int = 64


class GRUNet(nn.Module):
    """Embedding -> one-layer GRU -> linear head; ``out[:, t]`` reads tokens ``0..t``."""

    def __init__(self, vocab: int, out_dim: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.gru = nn.GRU(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, out_dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.embed(tokens))
        return self.head(out)

    def initial(self, batch: int) -> torch.Tensor:
        return torch.zeros(1, batch, self.gru.hidden_size)

    def step(self, tokens: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One token per row; ``BOS`` opens a new context, so the state restarts from zero there."""
        state = torch.where((tokens == BOS).view(1, -1, 1), 0.0, state)
        out, state = self.gru(self.embed(tokens).unsqueeze(1), state)
        return self.head(out[:, 0]), state


def _shift_right(x: torch.Tensor) -> torch.Tensor:
    """``y[:, t] = x[:, t-1]``, ``y[:, 0] = 0``: outputs after the prefix ``tokens[:, :t]``."""
    return torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)


def score_tokens(actor: GRUNet, tokens: torch.Tensor, config: EnvConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs [R, T], masked logits [R, T, V])`` of each token under the typed action space."""
    logits = _shift_right(actor(tokens))
    prev = _shift_right(tokens)
    logits = logits.masked_fill(~legal_action_mask(prev, config), NEG_INF)
    logprobs = torch.log_softmax(logits, dim=-1).gather(2, tokens.unsqueeze(2)).squeeze(2)
    return logprobs, logits


def critic_values(critic: GRUNet, tokens: torch.Tensor) -> torch.Tensor:
    """``values[:, t]``: the critic's estimate of the state in which token ``t`` is produced."""
    return _shift_right(critic(tokens).squeeze(-1))


def learning_auc(curve: list[dict]) -> float:
    """Mean training success over a run's iterations (each spends about the same tokens)."""
    return sum(r["success"] for r in curve) / len(curve) if curve else 0.0


def tokens_to_success(curve: list[dict], threshold: float = 0.9, window: int = 5) -> int | None:
    """Environment tokens spent when the training success, averaged over ``window`` iterations,
    first reaches ``threshold`` (None if it never does): the sample-efficiency side of the comparison,
    which final success alone hides once both algorithms converge."""
    for i in range(window - 1, len(curve)):
        if sum(r["success"] for r in curve[i - window + 1 : i + 1]) / window >= threshold:
            return int(curve[i]["env_tokens"])
    return None


@dataclass
class RunResult:
    algo: str
    horizon: str
    seed: int
    final_success: float
    env_tokens: int
    iterations: int
    seconds: float
    cpu_seconds: float
    curve: list[dict]


def advantage_batch(ro: Rollout, values: torch.Tensor | None) -> AdvantageBatch:
    """A synthetic rollout as the trainer's estimators take it: the outcome reward at each episode's
    last action token, no limit endings, nothing after the last row."""
    rows = ro.tokens.shape[0]
    return AdvantageBatch(
        token_rewards=place_episode_rewards(ro.action_mask, ro.row_rewards, ro.is_last),
        action_mask=ro.action_mask,
        episode_ids=ro.episode_ids,
        group_ids=ro.group_ids,
        sub_index=ro.sub_index,
        is_last=ro.is_last,
        truncated=torch.zeros(rows, dtype=torch.bool),
        values=values,
        final_values=torch.zeros(rows),
    )


def ppo_epochs(
    actor: GRUNet,
    critic: GRUNet | None,
    optimizer: torch.optim.Optimizer,
    ro: Rollout,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor | None,
    score: Callable[[GRUNet, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    hp: HyperParams,
    generator: torch.Generator,
) -> dict[str, list[float]]:
    """``hp.epochs`` passes of ``hp.minibatches`` clipped updates over the rollout's rows (actor and,
    when given, critic under one optimiser); the per-update statistics by name. ``score`` gives a
    row chunk's ``(logprobs, masked logits)`` under the benchmark's action space."""
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    mask = ro.action_mask
    stats: dict[str, list[float]] = {}
    rows = ro.tokens.shape[0]
    for _ in range(hp.epochs):
        for chunk in torch.randperm(rows, generator=generator).chunk(hp.minibatches):
            logprobs, logits = score(actor, ro.tokens[chunk])
            policy = compute_policy_loss(
                logprobs,
                ro.logprobs[chunk],
                advantages[chunk],
                mask[chunk],
                clip_low=hp.clip_low,
                clip_high=hp.clip_high,
                clip_ratio_c=hp.clip_ratio_c,
            )
            entropy = compute_entropy_bonus(logits, mask[chunk])
            loss = policy.loss - hp.entropy_coef * entropy
            if critic is not None and old_values is not None:
                values = critic_values(critic, ro.tokens[chunk])
                value = compute_value_loss(
                    values, old_values[chunk], returns[chunk], mask[chunk], hp.value_clip
                )
                loss = loss + hp.vf_coef * value.loss
                stats.setdefault("value_loss", []).append(float(value.loss.detach()))
            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(parameters, hp.max_grad_norm)
            optimizer.step()
            stats.setdefault("policy_loss", []).append(float(policy.loss.detach()))
            stats.setdefault("entropy", []).append(float(entropy.detach()))
            stats.setdefault("clip_fraction", []).append(float(policy.clip_fraction))
            stats.setdefault("approx_kl", []).append(float(policy.approx_kl))
            stats.setdefault("grad_norm", []).append(float(grad_norm))
    return stats


def _advantages(
    algo: str, ro: Rollout, values: torch.Tensor | None, hp: HyperParams
) -> tuple[torch.Tensor, torch.Tensor]:
    batch = advantage_batch(ro, values)
    config = AdvantageConfig(
        hp.gamma,
        hp.lam,
        critic_lam=hp.lam if hp.critic_lam is None else hp.critic_lam,
        chain_subtrajectories=hp.chain_subtrajectories,
        min_group_size=1 if algo == "ppo" else 2,
    )
    advantages, returns = ALGORITHMS.get(algo).estimate(batch, config)
    if algo == "ppo":
        advantages = masked_whiten(advantages, ro.action_mask)
    return advantages, returns


@torch.no_grad()
def evaluate(actor: GRUNet, config: EnvConfig, episodes: int, seed: int) -> float:
    """Success rate of the sampling policy on ``episodes`` fresh tasks (not greedy: what PPO trains)."""
    generator = torch.Generator().manual_seed(seed)
    tasks = sample_tasks(config, episodes, generator)
    return float(rollout(actor, tasks, config, generator).rewards.mean())


def train_one(
    algo: str,
    horizon: str,
    seed: int,
    budget_tokens: int,
    hp: HyperParams | None = None,
    eval_episodes: int = EVAL_EPISODES,
    config: EnvConfig | None = None,
) -> RunResult:
    """Train a fresh actor (and, for PPO, critic) on ``horizon`` until ``budget_tokens`` are spent.

    ``config`` replaces the horizon's environment (ablations such as ``reopen_summary=False``).
    """
    return train_policy(algo, horizon, seed, budget_tokens, hp, eval_episodes, config)[1]


def train_policy(
    algo: str,
    horizon: str,
    seed: int,
    budget_tokens: int,
    hp: HyperParams | None = None,
    eval_episodes: int = EVAL_EPISODES,
    config: EnvConfig | None = None,
) -> tuple[GRUNet, RunResult]:
    """:func:`train_one`, also returning the trained actor (the distillation benchmark's teachers)."""
    if algo not in BENCH_ALGORITHMS:
        raise ValueError(f"unknown algorithm {algo!r}; use one of {sorted(BENCH_ALGORITHMS)}")
    if horizon not in HORIZONS:
        raise ValueError(f"unknown horizon {horizon!r}; use one of {sorted(HORIZONS)}")
    hp = hp or HyperParams()
    config = config or HORIZONS[horizon]
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    actor = GRUNet(config.vocab_size, config.vocab_size, hp.embed, hp.hidden)
    critic = GRUNet(config.vocab_size, 1, hp.embed, hp.hidden) if algo == "ppo" else None
    params = list(actor.parameters()) + (list(critic.parameters()) if critic else [])
    optimizer = torch.optim.Adam(params, lr=hp.lr)

    started, cpu_started = time.perf_counter(), time.process_time()
    spent, iteration, curve = 0, 0, []
    while spent < budget_tokens:
        tasks = sample_tasks(config, hp.tasks_per_iter, generator).repeat(hp.group_size)
        groups = torch.arange(hp.tasks_per_iter).repeat_interleave(hp.group_size)
        ro = rollout(actor, tasks, config, generator, group_ids=groups)
        spent += ro.num_tokens
        mask = ro.action_mask
        with torch.no_grad():
            old_values = critic_values(critic, ro.tokens) if critic else None
            advantages, returns = _advantages(algo, ro, old_values, hp)

        stats = ppo_epochs(
            actor,
            critic,
            optimizer,
            ro,
            advantages,
            returns,
            old_values,
            lambda net, tokens: score_tokens(net, tokens, config),
            hp,
            generator,
        )

        record = {
            "run": f"{algo}_{horizon}_s{seed}",
            "algo": algo,
            "horizon": horizon,
            "seed": seed,
            "step": iteration,
            "env_tokens": spent,
            "success": float(ro.rewards.mean()),
            "subtrajectories_per_episode": float(ro.num_subs.float().mean()),
            **{name: sum(v) / len(v) for name, v in stats.items()},
        }
        if critic is not None:
            record["explained_variance"] = float(explained_variance(old_values, returns, mask))
            record["mean_value"] = float(masked_mean(old_values, mask))
        curve.append(
            {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        )
        iteration += 1

    final = evaluate(actor, config, eval_episodes, seed + 10_000)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return actor, RunResult(algo, horizon, seed, final, spent, iteration, wall, cpu, curve)


def _run_job(job: tuple[str, str, int, int, HyperParams]) -> RunResult:
    torch.set_num_threads(1)
    return train_one(*job)


def run_learn_bench(
    seeds: int = DEFAULT_SEEDS,
    out_dir: Path = Path("runs/bench-learn"),
    budget_tokens: int | None = None,
    workers: int = 2,
    hp: HyperParams | None = None,
    on_result: Callable[[RunResult], None] | None = None,
) -> dict:
    """Train every (algorithm, horizon, seed); write ``metrics.jsonl``, ``results.json`` and PNG curves.

    ``budget_tokens`` is the environment-token budget of one long-horizon run (both algorithms get the
    same); short-horizon runs get ``SHORT_BUDGET_FRACTION`` of it: one-turn episodes are about eight
    times shorter and both algorithms learn them in a small part of that. Runs go to ``workers``
    processes with one thread each; ``on_result`` hears of each finished run (progress).
    """
    from trainer.plot import plot_run

    if seeds < 1:
        raise TrainerError(f"--seeds must be at least 1, got {seeds}")
    if budget_tokens is not None and budget_tokens < 1:
        raise TrainerError(f"the token budget must be positive, got {budget_tokens}")
    if workers < 1:
        raise TrainerError(f"workers must be at least 1, got {workers}")
    hp = hp or HyperParams()
    long_budget = budget_tokens or DEFAULT_LONG_BUDGET
    budgets = {"long": long_budget, "short": max(1, math.ceil(long_budget * SHORT_BUDGET_FRACTION))}
    jobs = [
        (algo, horizon, seed, budgets[horizon], hp)
        for horizon in ("long", "short")
        for seed in range(seeds)
        for algo in BENCH_ALGORITHMS
    ]
    started = time.perf_counter()
    results: list[RunResult] = []
    if workers > 1:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            for future in as_completed([pool.submit(_run_job, job) for job in jobs]):
                results.append(future.result())
                if on_result:
                    on_result(results[-1])
    else:
        for job in jobs:
            results.append(_run_job(job))
            if on_result:
                on_result(results[-1])
    results.sort(key=lambda r: (r.horizon, r.algo, r.seed))

    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "metrics.jsonl").open("w") as fh:
        for result in results:
            for record in result.curve:
                fh.write(json.dumps(record) + "\n")
    summary: dict = {"seeds": seeds, "budget_tokens": budgets, "hyper_params": asdict(hp)}
    for algo in BENCH_ALGORITHMS:
        for horizon in HORIZONS:
            finals = [r.final_success for r in results if r.algo == algo and r.horizon == horizon]
            summary[f"{algo}_{horizon}"] = sum(finals) / len(finals)
            # Mean training success over the whole run: the area under the learning curve, the
            # sample-efficiency side of the comparison that final success hides once both converge.
            curves = [r.curve for r in results if r.algo == algo and r.horizon == horizon]
            summary[f"{algo}_{horizon}_auc"] = sum(learning_auc(c) for c in curves) / len(curves)
    summary["per_seed"] = [
        {**{k: v for k, v in asdict(r).items() if k != "curve"}, "tokens_to_0.9": tokens_to_success(r.curve)}
        for r in results
    ]
    summary["wall_seconds"] = time.perf_counter() - started
    summary["cpu_seconds"] = sum(r.cpu_seconds for r in results)
    (out_dir / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    summary["plots"] = [str(p) for p in plot_run(out_dir)]
    return summary
