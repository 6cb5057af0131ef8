"""The learning benchmark's synthetic environment: compaction, masks, and the key surviving summaries."""

import torch

from trainer.bench.synthetic_env import (
    ANSWER,
    BOS,
    FIRST_KEY,
    FOUND,
    LONG,
    NOTFOUND,
    PAD,
    SHORT,
    SUMMARIZE,
    SUMMARY,
    TOOL,
    TURN,
    EnvConfig,
    Rollout,
    rollout,
    sample_tasks,
)


class ScriptedPolicy:
    """Reads its context like a perfect memory would: answers (and summarises) the last key it saw.

    With ``forget_in_summary`` it writes a uniformly random key into every summary instead, so after
    a compaction the key is lost and only chance can get the reward.
    """

    def __init__(self, config: EnvConfig, forget_in_summary: bool = False) -> None:
        self.config = config
        self.forget = forget_in_summary

    def initial(self, batch: int) -> torch.Tensor:
        return torch.full((batch,), -1, dtype=torch.long)

    def step(self, tokens: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.config
        state = torch.where(tokens == BOS, -1, state)
        is_key = (tokens >= FIRST_KEY) & (tokens < cfg.first_work)
        state = torch.where(is_key, tokens, state)
        logits = torch.full((tokens.shape[0], cfg.vocab_size), -50.0)
        logits[:, cfg.first_work] = 50.0
        logits.scatter_(1, state.clamp(min=FIRST_KEY).unsqueeze(1), 50.0)
        if self.forget:
            uniform = (tokens == SUMMARIZE).unsqueeze(1) & (
                torch.arange(cfg.vocab_size) >= FIRST_KEY
            ).unsqueeze(0)
            logits = torch.where(uniform & (torch.arange(cfg.vocab_size) < cfg.first_work), 0.0, logits)
        return logits, state


class UniformPolicy:
    """Every legal token equally likely: what a freshly initialised policy roughly does."""

    def __init__(self, config: EnvConfig) -> None:
        self.config = config

    def initial(self, batch: int) -> torch.Tensor:
        return torch.zeros(batch)

    def step(self, tokens: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(tokens.shape[0], self.config.vocab_size), state


def _play(
    policy, config: EnvConfig, episodes: int, seed: int = 0, group: int = 1
) -> tuple[Rollout, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    tasks = sample_tasks(config, episodes, generator).repeat(group)
    return rollout(
        policy, tasks, config, generator, group_ids=torch.arange(episodes).repeat_interleave(group)
    ), tasks.key


def _row_lengths(ro: Rollout) -> torch.Tensor:
    return (ro.tokens != PAD).sum(dim=1)


def test_compaction_gives_variable_numbers_of_uneven_subtrajectories() -> None:
    ro, _ = _play(UniformPolicy(LONG), LONG, 512)
    counts = torch.bincount(ro.num_subs)
    assert int((counts > 10).sum()) >= 3, f"too few distinct sub-trajectory counts: {counts.tolist()}"
    lengths = _row_lengths(ro)
    assert len(torch.unique(lengths)) >= 8
    assert int(lengths.max()) - int(lengths.min()) >= 10
    # Rows are contiguous and in order per episode; the last row of each episode ends with the answer.
    assert torch.equal(torch.bincount(ro.episode_ids), ro.num_subs)
    last_pos = _row_lengths(ro) - 1
    prompt_before_last = ro.tokens[torch.arange(len(ro.tokens)), last_pos - 1]
    assert bool((prompt_before_last[ro.is_last] == ANSWER).all())
    assert bool((prompt_before_last[~ro.is_last] == SUMMARIZE).all())


def test_episodes_of_one_task_compact_differently() -> None:
    """The command picks the tool output's length, so a GRPO group has no common sub-trajectory layout."""
    ro, _ = _play(UniformPolicy(LONG), LONG, 64, group=8)
    subs = ro.num_subs.view(64, 8)
    differing = (subs.max(dim=1).values != subs.min(dim=1).values).float().mean()
    assert float(differing) > 0.3


def test_environment_tokens_have_mask_zero() -> None:
    ro, _ = _play(UniformPolicy(LONG), LONG, 256)
    cfg = LONG
    action = ro.action_mask.bool()
    env_only = (ro.tokens < FIRST_KEY) | (ro.tokens >= cfg.first_noise)
    assert not bool((action & env_only).any())
    assert bool(((ro.tokens >= FIRST_KEY) & (ro.tokens < cfg.first_noise))[action].all())
    assert not bool((action & (ro.tokens == PAD)).any())
    assert bool((ro.logprobs[~action] == 0).all())
    assert bool((ro.logprobs[action] < 0).all())
    # The first output's key, and the summary and commands replayed after a compaction, are prompt.
    later = ro.sub_index > 0
    assert bool((ro.tokens[later, 0] == BOS).all()) and bool((ro.tokens[later, 1] == SUMMARY).all())
    assert not bool(action[later, :5].any())
    assert bool(torch.isin(ro.tokens[later, 4], torch.tensor([FOUND, NOTFOUND])).all())
    first_rows = ro.sub_index == 0
    assert bool((ro.tokens[first_rows, :2] == torch.tensor([BOS, TOOL])).all())
    replayed_commands = (
        later.unsqueeze(1) & (ro.tokens >= cfg.first_work) & (ro.tokens < cfg.first_noise) & ~action
    )
    assert bool(replayed_commands.any())
    turn_prompts = ro.tokens == TURN
    assert not bool(action[turn_prompts].any())


def test_key_is_shown_once_and_only_summaries_carry_it() -> None:
    ro, keys = _play(UniformPolicy(LONG), LONG, 256)
    is_key = (ro.tokens >= FIRST_KEY) & (ro.tokens < LONG.first_work)
    env_keys = is_key & ~ro.action_mask.bool()
    first = ro.sub_index == 0
    assert bool((env_keys[first].sum(dim=1) == 1).all())
    shown = ro.tokens[first][env_keys[first]]
    assert torch.equal(shown, FIRST_KEY + keys)
    # After a compaction the only environment-written key token is the copy of the policy's summary.
    later = ~first
    assert bool((env_keys[later].sum(dim=1) == 1).all())
    assert bool(env_keys[later, 2].all())
    # Rows of an episode are consecutive, so row r - 1 is the sub-trajectory whose summary row r opens with.
    previous = torch.nonzero(later).flatten() - 1
    previous_summary = ro.tokens[previous, _row_lengths(ro)[previous] - 1]
    assert torch.equal(ro.tokens[later, 2], previous_summary)


def test_oracle_memory_earns_every_reward() -> None:
    ro, _ = _play(ScriptedPolicy(LONG), LONG, 512)
    assert bool((ro.num_subs > 1).float().mean() > 0.5)
    assert float(ro.rewards.mean()) == 1.0
    assert bool((ro.tokens[ro.sub_index > 0, 4] == FOUND).all())


def test_dropping_the_key_from_the_summary_leaves_only_chance() -> None:
    ro, _ = _play(ScriptedPolicy(LONG, forget_in_summary=True), LONG, 1024, seed=1)
    compacted = ro.num_subs > 1
    assert float(ro.rewards[~compacted].mean()) == 1.0
    chance = 1 / LONG.num_keys
    # Each summary is a fresh guess; success needs the last one right: about 1/num_keys.
    assert abs(float(ro.rewards[compacted].mean()) - chance) < 0.05


def test_short_variant_is_one_turn() -> None:
    ro, _ = _play(ScriptedPolicy(SHORT), SHORT, 128)
    assert bool((ro.num_subs == 1).all())
    assert bool((ro.action_mask.sum(dim=1) == 1).all())
    assert float(ro.rewards.mean()) == 1.0
    uniform, _ = _play(UniformPolicy(SHORT), SHORT, 1024)
    assert abs(float(uniform.rewards.mean()) - 1 / SHORT.num_keys) < 0.06
