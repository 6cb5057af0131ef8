"""A long-horizon synthetic task whose reward depends on a decision in the first turn.

Why: the trainer's claim for long agent episodes is that credit reaches early decisions across
compactions. This task isolates exactly that: the policy's first action token is a *choice* among
``num_choices`` (one of them right, the same for every task: like an agent's first command, good or
bad whatever the repository); the episode then runs ``turns`` turns of ``action_len`` action tokens
each (tool outputs of noise between them), compacted every 2-3 turns into a new sub-trajectory that
opens on an environment-written summary saying nothing about the choice; at the end the reward is 1
when the choice was the right one, else 0. So:

* the only thing that matters is one token, ~10 turns and >= 3 compactions before the reward;
* nothing in a compacted context tells the choice: a critic that sees only that context cannot
  value it, and per-sub-trajectory bootstrapping (each row's trace starting from 0 and reaching the
  reward only through the critic's value at the next row) gives the choice no signal at all;
* the choice *is* visible inside the first sub-trajectory, so a critic trained on Monte-Carlo
  targets (``critic_lam = 1``, chained across rows) learns ``V = 1[choice is right]`` right after
  it, and the actor's advantage at the choice is then ``V(after) - V(before)`` whatever the actor's
  lambda.

Random success is ``1 / num_choices``. (A version where a cue in the first tool output names the
right choice was tried first: the tiny GRU critic did not learn the cue-choice match within the
benchmark's budget, a capacity question, not a credit one.) Episode layout (``C`` choice, ``w``
work, ``n`` noise; ``*`` the policy's tokens):

```
B T n n n U C* w* ... (64) T n n U w* ... (64) T n n n        <- sub-trajectory 0 (turns 1-2)
B S n n U w* ... (64) T n U w* ... T n n U w* ... T n n        <- sub-trajectory 1 (turns 3-5)
...                                                  U w* ... (reward on the last action token)
```
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.bench.synthetic_env import Rollout, StepPolicy, _to_rows

PAD, BOS, TOOL, TURN, SUMMARY = range(5)
FIRST_CHOICE = 5


@dataclass(frozen=True)
class CreditConfig:
    """Shape of the episodes: ``turns`` turns of ``action_len`` action tokens, compaction every
    ``compact_every`` turns (so ``turns / max(compact_every)`` rounded up, minus one, boundaries)."""

    num_choices: int = 4
    num_work: int = 4
    num_noise: int = 8
    turns: int = 10
    action_len: int = 64
    tool_len: tuple[int, int] = (2, 5)
    compact_every: tuple[int, int] = (2, 3)
    summary_len: int = 2

    right_choice: int = 0

    @property
    def first_choice(self) -> int:
        return FIRST_CHOICE

    @property
    def first_work(self) -> int:
        return self.first_choice + self.num_choices

    @property
    def first_noise(self) -> int:
        return self.first_work + self.num_work

    @property
    def vocab_size(self) -> int:
        return self.first_noise + self.num_noise

    @property
    def min_boundaries(self) -> int:
        """Compactions every episode has at least (the credit crosses this many boundaries)."""
        return -(-self.turns // self.compact_every[1]) - 1

    def __post_init__(self) -> None:
        if self.num_choices < 2 or self.num_work < 1 or self.num_noise < 1 or self.action_len < 1:
            raise ValueError("need >= 2 choices and at least one work token, noise token and action token")
        if self.turns < 1 or not 1 <= self.compact_every[0] <= self.compact_every[1]:
            raise ValueError("need turns >= 1 and 1 <= compact_every[0] <= compact_every[1]")
        if not 1 <= self.tool_len[0] <= self.tool_len[1]:
            raise ValueError("need 1 <= tool_len[0] <= tool_len[1]")
        if not 0 <= self.right_choice < self.num_choices:
            raise ValueError("right_choice must be one of the choices")


@dataclass(frozen=True)
class CreditTasks:
    """Per task: each turn's tool-output length and whether a compaction follows it."""

    tool_len: torch.Tensor  # [E, turns]
    compact_after: torch.Tensor  # [E, turns] bool

    def repeat(self, group_size: int) -> CreditTasks:
        return CreditTasks(*(t.repeat_interleave(group_size, dim=0) for t in vars(self).values()))


def sample_credit_tasks(config: CreditConfig, count: int, generator: torch.Generator) -> CreditTasks:
    low, high = config.tool_len
    tool_len = torch.randint(low, high + 1, (count, config.turns), generator=generator)
    compact_after = torch.zeros(count, config.turns, dtype=torch.bool)
    for e in range(count):
        turn = 0
        while True:
            turn += int(
                torch.randint(config.compact_every[0], config.compact_every[1] + 1, (1,), generator=generator)
            )
            if turn >= config.turns:
                break
            compact_after[e, turn - 1] = True
    return CreditTasks(tool_len, compact_after)


@dataclass(frozen=True)
class Template:
    """Each episode's token stream with the policy's slots left open: ``tokens [E, S]`` (environment
    tokens; PAD in action slots), ``is_action``, ``is_choice``, ``sub`` and ``pos`` (row and column of
    each token in its sub-trajectory), ``live`` (inside the episode)."""

    tokens: torch.Tensor
    is_action: torch.Tensor
    is_choice: torch.Tensor
    sub: torch.Tensor
    pos: torch.Tensor
    live: torch.Tensor


class _Stream:
    """One episode's stream being written: token, slot kind, row and column of each position."""

    def __init__(self) -> None:
        self.columns: tuple[list[int], ...] = ([], [], [], [], [])  # token, action, choice, row, column
        self.row = self.col = 0

    def put(self, token: int, action: bool = False, is_choice: bool = False) -> None:
        for column, value in zip(self.columns, (token, action, is_choice, self.row, self.col), strict=True):
            column.append(int(value))
        self.col += 1

    def new_row(self) -> None:
        self.row, self.col = self.row + 1, 0


def build_template(tasks: CreditTasks, config: CreditConfig, generator: torch.Generator) -> Template:
    """The environment never reacts to the policy's tokens (only the reward does), so each episode's
    whole stream can be laid out before it is played."""
    streams = []
    for e in range(tasks.tool_len.shape[0]):
        stream = _Stream()
        noise = torch.randint(
            config.num_noise, (64 + config.turns * config.tool_len[1],), generator=generator
        )
        drawn = iter((config.first_noise + noise).tolist())
        stream.put(BOS)
        stream.put(TOOL)
        for _ in range(3):
            stream.put(next(drawn))
        for turn in range(config.turns):
            stream.put(TURN)
            for k in range(config.action_len):
                stream.put(PAD, action=True, is_choice=turn == 0 and k == 0)
            if turn == config.turns - 1:
                break
            stream.put(TOOL)
            for _ in range(int(tasks.tool_len[e, turn])):
                stream.put(next(drawn))
            if bool(tasks.compact_after[e, turn]):
                stream.new_row()
                stream.put(BOS)
                stream.put(SUMMARY)
                for _ in range(config.summary_len):
                    stream.put(next(drawn))
        streams.append(stream.columns)
    width = max(len(s[0]) for s in streams)
    out = [torch.zeros(len(streams), width, dtype=torch.long) for _ in range(5)]
    live = torch.zeros(len(streams), width, dtype=torch.bool)
    for e, columns in enumerate(streams):
        n = len(columns[0])
        for tensor, values in zip(out, columns, strict=True):
            tensor[e, :n] = torch.tensor(values, dtype=torch.long)
        live[e, :n] = True
    tokens, is_action, is_choice, sub, pos = out
    return Template(tokens, is_action.bool(), is_choice.bool(), sub, pos, live)


def legal_actions(is_choice: torch.Tensor, config: CreditConfig) -> torch.Tensor:
    """``[..., V]`` bool: choice tokens at the choice slot, work tokens at every other action slot."""
    vocab = torch.arange(config.vocab_size, device=is_choice.device)
    choices = (vocab >= config.first_choice) & (vocab < config.first_work)
    work = (vocab >= config.first_work) & (vocab < config.first_noise)
    return torch.where(is_choice.unsqueeze(-1), choices, work)


@dataclass(frozen=True)
class CreditRollout:
    """The rows of a batch of played episodes (``rollout``, the trainer's layout), where each row's
    choice token is (``is_choice [R, T]``), and per episode the choice and the probability the policy
    gave the right one (``p_right``: the exact value of the state in which it chose)."""

    rollout: Rollout
    is_choice: torch.Tensor
    choice: torch.Tensor
    p_right: torch.Tensor

    @property
    def right(self) -> torch.Tensor:
        """Per episode: the choice was the right one (the reward)."""
        return self.rollout.rewards > 0


@torch.no_grad()
def play(
    policy: StepPolicy,
    tasks: CreditTasks,
    config: CreditConfig,
    generator: torch.Generator,
    group_ids: torch.Tensor | None = None,
) -> CreditRollout:
    """Play one episode per task with ``policy`` (Gumbel-max sampling among the legal tokens)."""
    template = build_template(tasks, config, generator)
    count, width = template.tokens.shape
    if group_ids is None:
        group_ids = torch.arange(count)
    state = policy.initial(count)
    logits = torch.zeros(count, config.vocab_size)
    tokens = template.tokens.clone()
    logp = torch.zeros(count, width)
    p_right = torch.zeros(count)
    right_token = torch.full((count, 1), config.first_choice + config.right_choice)
    for t in range(width):
        acting = template.is_action[:, t] & template.live[:, t]
        if bool(acting.any()):
            legal = legal_actions(template.is_choice[:, t], config)
            log_probs = torch.log_softmax(logits.masked_fill(~legal, float("-inf")), dim=-1)
            gumbel = -torch.empty_like(log_probs).exponential_(generator=generator).log()
            sampled = (log_probs + gumbel).argmax(dim=1)
            tokens[:, t] = torch.where(acting, sampled, tokens[:, t])
            logp[:, t] = torch.where(acting, log_probs.gather(1, sampled.unsqueeze(1)).squeeze(1), 0.0)
            choosing = template.is_choice[:, t]
            if bool(choosing.any()):
                p_right = torch.where(choosing, log_probs.gather(1, right_token).squeeze(1).exp(), p_right)
        logits, state = policy.step(tokens[:, t], state)
    choice_col = template.is_choice.float().argmax(dim=1)
    choice = tokens.gather(1, choice_col.unsqueeze(1)).squeeze(1) - config.first_choice
    reward = (choice == config.right_choice).float()
    rows = _to_rows(
        tokens, template.is_action, logp, template.sub, template.pos, template.live, reward, group_ids
    )
    is_choice = torch.zeros_like(rows.action_mask, dtype=torch.bool)
    first_rows = torch.nonzero(rows.sub_index == 0).flatten()
    cols = (rows.action_mask[first_rows] > 0).float().argmax(dim=1)
    is_choice[first_rows, cols] = True
    return CreditRollout(rows, is_choice, choice, p_right)
