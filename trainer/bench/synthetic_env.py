"""A batched synthetic token environment that mirrors the agent setting of the learning benchmark.

Why it exists: the trainer's claim is that PPO with a learned critic assigns credit inside long,
compacted agent episodes where GRPO's one-number-per-episode advantage does not. Testing that on a
real LLM agent takes GPUs and hours; this environment keeps the *structure* of such an episode and
fits in a few minutes of CPU:

* **multi-turn with tool output**: the episode opens with a tool output that shows a *key* token among
  noise; then, for each turn, the environment prompts (``TURN``), the policy writes a short command
  (``action_len`` work tokens) and the environment answers with a tool output whose length depends on
  the command (so episodes of one task diverge in length, as real agent episodes do). Every token the
  environment writes has action mask 0.
* **compaction**: when the context grows past ``context_limit`` and turns remain, the environment asks
  for a summary (``SUMMARIZE``); the policy writes one summary token and the sub-trajectory ends. The
  next sub-trajectory's context is ``BOS SUMMARY <summary> <re-opened item> <last turn> TURN``: the
  summary the policy wrote, the harness re-opening the item the summary names (as agent harnesses
  re-read the files a summary mentions after compaction: ``FOUND`` when it names the key, ``NOTFOUND``
  otherwise; the key itself is never shown again), and the most recent turn. So episodes split into a
  variable number of sub-trajectories of uneven length, and the key survives only if every summary
  carries it.
* **one sparse reward**: after the last turn the environment asks for the answer (``ANSWER``); reward 1
  when the answer token is the key, else 0, on the last action token of the last sub-trajectory.

The short-horizon variant is one turn: the key is shown and the answer is asked at once.

Actions are typed, like function-calling grammars constrain an LLM's output: after ``SUMMARIZE`` or
``ANSWER`` the policy picks one of the key tokens, elsewhere one of the work tokens
(:func:`legal_action_mask`). A random policy thus succeeds with probability ``num_keys ** -(c + 1)``
for an episode with ``c`` compactions.

Everything is a batched tensor state machine: all episodes of a batch advance one token per step, the
policy is called once per step for the whole batch.
"""

from dataclasses import dataclass
from typing import Protocol

import torch

PAD, BOS, TOOL, TURN, SUMMARIZE, SUMMARY, ANSWER, FOUND, NOTFOUND = range(9)
FIRST_KEY = 9
ROLE_WORK, ROLE_SUMMARY, ROLE_ANSWER = 0, 1, 2


@dataclass(frozen=True)
class EnvConfig:
    """Shape of the episodes. ``min_turns == max_turns == 0`` is the one-turn short variant."""

    num_keys: int = 4
    num_work: int = 4
    num_noise: int = 8
    action_len: int = 2
    min_turns: int = 2
    max_turns: int = 4
    first_output_len: tuple[int, int] = (3, 6)
    tool_output_range: int = 6
    context_limit: int = 16
    reopen_summary: bool = True

    @property
    def first_work(self) -> int:
        return FIRST_KEY + self.num_keys

    @property
    def first_noise(self) -> int:
        return self.first_work + self.num_work

    @property
    def vocab_size(self) -> int:
        return self.first_noise + self.num_noise

    @property
    def turn_len_max(self) -> int:
        return 2 + self.action_len + self.tool_output_range

    def __post_init__(self) -> None:
        if self.num_keys < 2 or self.num_work < 1 or self.num_noise < 1 or self.action_len < 1:
            raise ValueError("need num_keys >= 2 and at least one work token, noise token and action token")
        if not 0 <= self.min_turns <= self.max_turns:
            raise ValueError("need 0 <= min_turns <= max_turns")
        low, high = self.first_output_len
        if not 1 <= low <= high:
            raise ValueError("need 1 <= first_output_len[0] <= first_output_len[1]")
        if self.tool_output_range < 1 or self.context_limit < 1:
            raise ValueError("tool_output_range and context_limit must be positive")


LONG = EnvConfig()
SHORT = EnvConfig(min_turns=0, max_turns=0)
HORIZONS: dict[str, EnvConfig] = {"long": LONG, "short": SHORT}


@dataclass(frozen=True)
class Tasks:
    """What is fixed per task (shared by every episode of a GRPO group): key, turn count, first output.

    ``turn_offsets[b, t]`` shifts the length of the tool output of turn ``t``; the command chosen by
    the policy shifts it further, so one task's episodes compact differently.
    """

    key: torch.Tensor
    num_turns: torch.Tensor
    first_output: torch.Tensor
    first_output_len: torch.Tensor
    turn_offsets: torch.Tensor

    def repeat(self, group_size: int) -> "Tasks":
        """Each task ``group_size`` times in a row (episode ``i`` plays task ``i // group_size``)."""
        return Tasks(*(t.repeat_interleave(group_size, dim=0) for t in vars(self).values()))


def sample_tasks(config: EnvConfig, count: int, generator: torch.Generator) -> Tasks:
    """Draw ``count`` tasks: a random key hidden at a random place among noise in the first output."""
    low, high = config.first_output_len
    key = torch.randint(config.num_keys, (count,), generator=generator)
    num_turns = torch.randint(config.min_turns, config.max_turns + 1, (count,), generator=generator)
    length = torch.randint(low, high + 1, (count,), generator=generator)
    noise = config.first_noise + torch.randint(config.num_noise, (count, high), generator=generator)
    where = (torch.rand(count, generator=generator) * length).long()
    positions = torch.arange(high).unsqueeze(0)
    first = torch.where(positions == where.unsqueeze(1), FIRST_KEY + key.unsqueeze(1), noise)
    first = torch.where(positions < length.unsqueeze(1), first, PAD)
    offsets = torch.randint(config.tool_output_range, (count, max(config.max_turns, 1)), generator=generator)
    return Tasks(key, num_turns, first, length, offsets)


def legal_action_mask(prev_tokens: torch.Tensor, config: EnvConfig) -> torch.Tensor:
    """``[..., V]`` bool: the tokens the policy may emit after ``prev_tokens`` (the typed action space).

    Used identically when sampling and when re-scoring in training, so the logprobs match.
    """
    vocab = torch.arange(config.vocab_size, device=prev_tokens.device)
    is_key = (vocab >= FIRST_KEY) & (vocab < config.first_work)
    is_work = (vocab >= config.first_work) & (vocab < config.first_noise)
    wants_key = (prev_tokens == SUMMARIZE) | (prev_tokens == ANSWER)
    return torch.where(wants_key.unsqueeze(-1), is_key, is_work)


@dataclass(frozen=True)
class Rollout:
    """A batch of episodes cut into sub-trajectory rows, in the trainer's record layout.

    ``tokens``, ``action_mask``, ``logprobs`` are ``[R, T]`` (right-padded with PAD, mask 0);
    ``episode_ids``, ``sub_index``, ``is_last``, ``group_ids`` are ``[R]``; ``rewards`` and
    ``num_subs`` are per episode ``[E]``. ``rewards[e]`` is also in ``row_rewards`` on the episode's
    last row.
    """

    tokens: torch.Tensor
    action_mask: torch.Tensor
    logprobs: torch.Tensor
    episode_ids: torch.Tensor
    sub_index: torch.Tensor
    is_last: torch.Tensor
    group_ids: torch.Tensor
    row_rewards: torch.Tensor
    rewards: torch.Tensor
    num_subs: torch.Tensor

    @property
    def num_tokens(self) -> int:
        """Environment tokens spent: every token of every sub-trajectory (prompt, tool output, actions)."""
        return int((self.tokens != PAD).sum())


class StepPolicy(Protocol):
    """What :func:`rollout` needs from a policy: a recurrent step over one token per episode.

    ``initial(batch)`` gives an empty state; ``step(tokens, state)`` consumes one token per row and
    returns ``(next_token_logits [B, V], state)``. :class:`trainer.bench.learn_bench.GRUPolicy` implements it.
    """

    def initial(self, batch: int) -> torch.Tensor: ...

    def step(self, tokens: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class _Queues:
    """Per-row queues of environment tokens still to emit (written whole, drained one per step)."""

    def __init__(self, batch: int, width: int) -> None:
        self.tokens = torch.full((batch, width), PAD, dtype=torch.long)
        self.length = torch.zeros(batch, dtype=torch.long)
        self.pos = torch.zeros(batch, dtype=torch.long)

    def replace(self, rows: torch.Tensor, tokens: torch.Tensor, length: torch.Tensor) -> None:
        width = self.tokens.shape[1]
        if bool((length[rows] > width).any()):
            raise AssertionError("environment queue overflow")
        padded = torch.full_like(self.tokens, PAD)
        padded[:, : tokens.shape[1]] = tokens[:, :width]
        self.tokens = torch.where(rows.unsqueeze(1), padded, self.tokens)
        self.length = torch.where(rows, length, self.length)
        self.pos = torch.where(rows, 0, self.pos)

    def pending(self) -> torch.Tensor:
        return self.pos < self.length

    def head(self) -> torch.Tensor:
        return self.tokens.gather(1, self.pos.clamp(max=self.tokens.shape[1] - 1).unsqueeze(1)).squeeze(1)


def _place(base: torch.Tensor, at: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``base`` with ``base[b, at[b]] = values[b]`` for every row."""
    return base.scatter(1, at.unsqueeze(1), values.unsqueeze(1))


@torch.no_grad()
def rollout(
    policy: StepPolicy,
    tasks: Tasks,
    config: EnvConfig,
    generator: torch.Generator,
    group_ids: torch.Tensor | None = None,
) -> Rollout:
    """Play one episode per row of ``tasks`` with ``policy``; return the sub-trajectory rows.

    Actions are sampled from the policy's distribution restricted to the legal tokens (Gumbel-max,
    cheaper than ``multinomial`` at this size).
    """
    batch = tasks.key.shape[0]
    if group_ids is None:
        group_ids = torch.arange(batch)
    cfg = config
    width = 8 + cfg.turn_len_max + int(tasks.first_output_len.max())
    queue = _Queues(batch, width)
    rows = torch.arange(batch)

    # Opening: BOS TOOL <first output with the key> then TURN (or ANSWER in the one-turn variant).
    first_len = tasks.first_output_len
    opening = torch.full((batch, width), PAD, dtype=torch.long)
    opening[:, 0], opening[:, 1] = BOS, TOOL
    opening[:, 2 : 2 + tasks.first_output.shape[1]] = tasks.first_output
    has_turns = tasks.num_turns > 0
    opening = _place(opening, 2 + first_len, torch.where(has_turns, TURN, ANSWER))
    queue.replace(torch.ones(batch, dtype=torch.bool), opening, 3 + first_len)

    role = torch.where(has_turns, ROLE_WORK, ROLE_ANSWER)
    pol_left = torch.where(has_turns, cfg.action_len, 1)
    turns_left = (tasks.num_turns - 1).clamp(min=0)
    turn_index = torch.zeros(batch, dtype=torch.long)
    ctx_len = torch.zeros(batch, dtype=torch.long)
    sub_idx = torch.zeros(batch, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    reward = torch.zeros(batch)
    act_buf = torch.full((batch, cfg.action_len), PAD, dtype=torch.long)
    act_pos = torch.zeros(batch, dtype=torch.long)
    last_turn = torch.full((batch, cfg.turn_len_max), PAD, dtype=torch.long)
    last_turn_len = torch.zeros(batch, dtype=torch.long)
    state = policy.initial(batch)
    logits = torch.zeros(batch, cfg.vocab_size)
    prev = torch.full((batch,), PAD, dtype=torch.long)

    rec_tok, rec_act, rec_logp, rec_sub, rec_pos, rec_live = [], [], [], [], [], []
    max_steps = 64 + (cfg.max_turns + 2) * (width + cfg.turn_len_max)
    for _ in range(max_steps):
        if bool(done.all()):
            break
        live = ~done
        from_env = queue.pending() & live
        legal = legal_action_mask(prev, cfg)
        masked = logits.masked_fill(~legal, float("-inf"))
        log_probs = torch.log_softmax(masked, dim=-1)
        gumbel = -torch.empty_like(log_probs).exponential_(generator=generator).log()
        sampled = (log_probs + gumbel).argmax(dim=1)
        token = torch.where(from_env, queue.head(), sampled)
        token = torch.where(live, token, PAD)
        is_action = live & ~from_env
        logp = torch.where(is_action, log_probs.gather(1, sampled.unsqueeze(1)).squeeze(1), 0.0)

        rec_tok.append(token)
        rec_act.append(is_action)
        rec_logp.append(logp)
        rec_sub.append(sub_idx.clone())
        rec_pos.append(ctx_len.clone())
        rec_live.append(live)

        queue.pos = queue.pos + from_env.long()
        ctx_len = ctx_len + live.long()
        logits, state = policy.step(token, state)
        prev = token

        # Policy bookkeeping: collect the command, count down the action.
        is_work = is_action & (role == ROLE_WORK)
        act_buf = torch.where(
            is_work.unsqueeze(1) & (torch.arange(cfg.action_len) == act_pos.unsqueeze(1)),
            token.unsqueeze(1),
            act_buf,
        )
        act_pos = act_pos + is_work.long()
        pol_left = pol_left - is_action.long()
        finished = is_action & (pol_left == 0)
        work_done = finished & (role == ROLE_WORK)
        summary_done = finished & (role == ROLE_SUMMARY)
        answer_done = finished & (role == ROLE_ANSWER)

        # A command finished: tool output (length set by the task's offset and the command), then the
        # next prompt: the answer when no turn is left, a summary when the context is too long, else a turn.
        if bool(work_done.any()):
            offset = tasks.turn_offsets[rows, turn_index.clamp(max=tasks.turn_offsets.shape[1] - 1)]
            out_len = 1 + (offset + act_buf[:, 0] - cfg.first_work) % cfg.tool_output_range
            noise = cfg.first_noise + torch.randint(
                cfg.num_noise, (batch, cfg.tool_output_range), generator=generator
            )
            positions = torch.arange(cfg.tool_output_range).unsqueeze(0)
            noise = torch.where(positions < out_len.unsqueeze(1), noise, PAD)
            new_ctx = ctx_len + 1 + out_len
            to_answer = turns_left == 0
            to_summary = ~to_answer & (new_ctx > cfg.context_limit)
            next_prompt = torch.where(to_answer, ANSWER, torch.where(to_summary, SUMMARIZE, TURN))
            response = torch.cat([torch.full((batch, 1), TOOL), noise], dim=1)
            response = torch.cat([response, torch.full((batch, 1), PAD)], dim=1)
            response = _place(response, 1 + out_len, next_prompt)
            queue.replace(work_done, response, 2 + out_len)

            turn = torch.cat(
                [torch.full((batch, 1), TURN), act_buf, torch.full((batch, 1), TOOL), noise], dim=1
            )
            last_turn = torch.where(work_done.unsqueeze(1), turn, last_turn)
            last_turn_len = torch.where(work_done, 2 + cfg.action_len + out_len, last_turn_len)
            next_role = torch.where(
                to_answer | to_summary, torch.where(to_answer, ROLE_ANSWER, ROLE_SUMMARY), ROLE_WORK
            )
            role = torch.where(work_done, next_role, role)
            starts_turn = work_done & (next_prompt == TURN)
            pol_left = torch.where(work_done, torch.where(starts_turn, cfg.action_len, 1), pol_left)
            turns_left = turns_left - starts_turn.long()
            turn_index = turn_index + work_done.long()
            act_pos = torch.where(work_done, 0, act_pos)

        # A summary finished: the sub-trajectory ends; the next one opens on the compacted context.
        if bool(summary_done.any()):
            found = torch.where(token == FIRST_KEY + tasks.key, FOUND, NOTFOUND)
            head = torch.stack([torch.full((batch,), BOS), torch.full((batch,), SUMMARY), token], dim=1)
            if cfg.reopen_summary:
                head = torch.cat([head, torch.full((batch, 1), TOOL), found.unsqueeze(1)], dim=1)
            compacted = torch.cat([head, last_turn, torch.full((batch, 1), PAD)], dim=1)
            compacted = _place(compacted, head.shape[1] + last_turn_len, torch.full((batch,), TURN))
            queue.replace(summary_done, compacted, head.shape[1] + last_turn_len + 1)
            role = torch.where(summary_done, ROLE_WORK, role)
            pol_left = torch.where(summary_done, cfg.action_len, pol_left)
            turns_left = turns_left - summary_done.long()
            sub_idx = sub_idx + summary_done.long()
            ctx_len = torch.where(summary_done, 0, ctx_len)

        reward = torch.where(answer_done, (token == FIRST_KEY + tasks.key).float(), reward)
        done = done | answer_done
    else:
        raise AssertionError("episodes did not finish within the step limit")

    return _to_rows(
        torch.stack(rec_tok, 1),
        torch.stack(rec_act, 1),
        torch.stack(rec_logp, 1),
        torch.stack(rec_sub, 1),
        torch.stack(rec_pos, 1),
        torch.stack(rec_live, 1),
        reward,
        group_ids,
    )


def _to_rows(
    tokens: torch.Tensor,
    is_action: torch.Tensor,
    logp: torch.Tensor,
    sub: torch.Tensor,
    pos: torch.Tensor,
    live: torch.Tensor,
    reward: torch.Tensor,
    group_ids: torch.Tensor,
) -> Rollout:
    """Scatter per-episode token streams ``[E, S]`` into sub-trajectory rows ``[R, T]``."""
    episodes = tokens.shape[0]
    num_subs = torch.where(live, sub, -1).max(dim=1).values + 1
    row_start = torch.cumsum(num_subs, 0) - num_subs
    num_rows = int(num_subs.sum())
    width = int(pos[live].max()) + 1
    row = (row_start.unsqueeze(1) + sub)[live]
    col = pos[live]
    out_tokens = torch.full((num_rows, width), PAD, dtype=torch.long)
    out_mask = torch.zeros((num_rows, width))
    out_logp = torch.zeros((num_rows, width))
    out_tokens[row, col] = tokens[live]
    out_mask[row, col] = is_action[live].float()
    out_logp[row, col] = logp[live]
    episode_ids = torch.repeat_interleave(torch.arange(episodes), num_subs)
    sub_index = torch.arange(num_rows) - row_start[episode_ids]
    is_last = sub_index == num_subs[episode_ids] - 1
    row_rewards = torch.where(is_last, reward[episode_ids], 0.0)
    return Rollout(
        out_tokens,
        out_mask,
        out_logp,
        episode_ids,
        sub_index,
        is_last,
        group_ids[episode_ids],
        row_rewards,
        reward,
        num_subs,
    )
