"""Trainer settings (embedded in ``rlguard.settings.Settings`` as ``trainer``)."""

from pydantic import BaseModel, Field


class TrainerSettings(BaseModel):
    """PPO/GRPO hyper-parameters and runtime knobs that operators set without editing code."""

    gamma: float = Field(1.0, ge=0, le=1)
    lam: float = Field(0.95, ge=0, le=1)
    critic_warmup_steps: int = Field(0, ge=0)
    critic_updates_per_actor_update: int = Field(1, ge=1)
    micro_batch_tokens: int = Field(8192, gt=0, description="Token budget of one packed micro-batch")
