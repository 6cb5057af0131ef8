"""Trainer fixtures: a tiny HF causal LM built from a config (no hub, no tokenizer) and a sampler."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from trainer.batch import Sample

VOCAB = 16
TARGET = 5  # the "trivial task": emit this token


def build_tiny_model(directory: Path, seed: int = 0) -> Path:
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    return directory


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@torch.no_grad()
def sample_tokens(
    model: torch.nn.Module, prompts: torch.Tensor, n: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestral sampling of ``n`` tokens for each row of equal-length ``prompts``: (tokens, logprobs)."""
    ids = prompts
    tokens, logprobs = [], []
    for _ in range(n):
        logp = torch.log_softmax(model(input_ids=ids).logits[:, -1].float(), dim=-1)
        token = torch.multinomial(logp.exp(), 1, generator=gen)
        tokens.append(token)
        logprobs.append(logp.gather(1, token))
        ids = torch.cat([ids, token], dim=1)
    return torch.cat(tokens, dim=1), torch.cat(logprobs, dim=1)


def two_part_episodes(
    model: torch.nn.Module, n_episodes: int, seed: int, version: int = 0, first_episode_id: int = 0
) -> list[Sample]:
    """Episodes of two sub-trajectories (a compaction in between) and tool tokens between turns.

    Sub-trajectory 0: prompt [2, 3], act 2 tokens, tool output [4], act 1 token.
    Sub-trajectory 1: summary prompt [2, 6], act 2 tokens. Reward: share of acted tokens == TARGET.
    """
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    first = torch.tensor([[2, 3]] * n_episodes)
    a, la = sample_tokens(model, first, 2, gen)
    b, lb = sample_tokens(model, torch.cat([first, a, torch.full((n_episodes, 1), 4)], dim=1), 1, gen)
    c, lc = sample_tokens(model, torch.tensor([[2, 6]] * n_episodes), 2, gen)
    samples: list[Sample] = []
    for e in range(n_episodes):
        episode = first_episode_id + e
        acted = [*a[e].tolist(), *b[e].tolist(), *c[e].tolist()]
        reward = sum(t == TARGET for t in acted) / len(acted)
        common = dict(episode_id=episode, reward=reward, group_id=episode // 4, policy_version=version)
        samples.append(
            Sample(
                input_ids=[2, 3, *a[e].tolist(), 4, *b[e].tolist()],
                action_mask=[0, 0, 1, 1, 0, 1],
                logprobs=[0, 0, *la[e].tolist(), 0, *lb[e].tolist()],
                sub_index=0,
                is_last=False,
                truncated=False,
                **common,
            )
        )
        samples.append(
            Sample(
                input_ids=[2, 6, *c[e].tolist()],
                action_mask=[0, 0, 1, 1],
                logprobs=[0, 0, *lc[e].tolist()],
                sub_index=1,
                is_last=True,
                truncated=False,
                **common,
            )
        )
    return samples


def store_episode(
    store,
    episode_id: str,
    task_id: str,
    reward: float,
    parts: list[tuple[list[int], list[int]]],
    status: str = "finished",
    policy_version: str = "0",
    details: dict | None = None,
    run: str | None = None,
) -> None:
    """Write one ended episode with its sub-trajectories (token ids, action mask) into ``store``."""
    from store.codec import encode_action_mask, encode_logprobs, encode_token_ids
    from store.models import EpisodeRow, EpisodeStatus, SubTrajectoryRow

    store.upsert_task(task_id, task_id.split("/")[0], "", "", {})
    store.create_episode(
        EpisodeRow(
            id=episode_id,
            task_id=task_id,
            policy_version=policy_version,
            agent_token_hash=episode_id,
            run=run,
        )
    )
    for index, (ids, mask) in enumerate(parts):
        store.add_sub_trajectory(
            SubTrajectoryRow(
                episode_id=episode_id,
                index=index,
                num_tokens=len(ids),
                token_ids=encode_token_ids(ids),
                action_mask=encode_action_mask(mask),
                logprobs=encode_logprobs([-2.7 if m else 0.0 for m in mask]),
                policy_version=policy_version,
            )
        )
    store.end_episode(episode_id, EpisodeStatus(status), reward=reward, details=details)
