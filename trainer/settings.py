"""Trainer settings (embedded in ``rlguard.settings.Settings`` as ``trainer``)."""

from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class TrainerSettings(BaseModel):
    """PPO/GRPO hyper-parameters and runtime knobs that operators set without editing code."""

    # algorithm
    algo: Literal["ppo", "grpo", "rloo", "reinforce_pp", "opd"] = Field(
        "ppo", description="ppo = GAE + critic; opd = on-policy distillation from teachers"
    )
    gamma: float = Field(1.0, ge=0, le=1)
    lam: float = Field(0.95, ge=0, le=1)
    clip_low: float = Field(0.2, gt=0, lt=1, description="PPO ratio clip below 1")
    clip_high: float = Field(0.28, gt=0, description="PPO ratio clip above 1 (clip-higher)")
    clip_ratio_c: float = Field(3.0, gt=1, description="Dual-clip bound for negative advantages")
    value_clip: float = Field(0.2, gt=0, description="How far the critic may move per update")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum"] = "token-mean"
    entropy_coef: float = Field(0.0, ge=0)
    kl_coef: float = Field(0.0, ge=0, description="Weight of KL to the reference policy; 0 = no reference")
    kl_estimator: Literal["k1", "k3"] = "k3"
    kl_in_reward: bool = Field(True, description="KL shaped into token rewards (else a loss term)")
    normalize_advantages: bool = Field(True, description="Whiten GAE advantages over the batch")
    tis_cap: float = Field(2.0, gt=0, description="Truncated importance weight cap for stale data")
    max_staleness: int | None = Field(
        None, ge=0, description="Versions a token may lag the trainer; older episodes: stale_mode"
    )
    stale_mode: Literal["drop", "tis"] = Field(
        "drop", description="Episodes older than max_staleness: drop them, or keep them with TIS"
    )
    # on-policy distillation (algo opd)
    teachers: dict[str, str] = Field(default_factory=dict, description="Teacher name -> HF directory")
    routes: dict[str, str] = Field(
        default_factory=dict, description="Task group (suite) -> teacher name; one teacher needs none"
    )
    reward_weight: float = Field(0.0, description="Weight of the task reward's GRPO advantage in opd")
    # optimisation
    actor_lr: float = Field(1e-6, gt=0)
    critic_lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    ppo_epochs: int = Field(1, ge=1, description="Passes over each step's batch")
    critic_warmup_steps: int = Field(0, ge=0, description="Steps that train only the critic")
    critic_updates_per_actor_update: int = Field(1, ge=1)
    micro_batch_tokens: int = Field(8192, gt=0, description="Token budget of one packed micro-batch")
    max_sequence_tokens: int = Field(32768, gt=0, description="Longer sub-trajectories are refused")
    # runtime
    seed: int = 0
    gradient_checkpointing: bool = False
    parallel: Literal["ddp", "fsdp"] = Field("ddp", description="Wrapping under torchrun (world size > 1)")
    critic_model_path: str | None = Field(None, description="Critic backbone; default: the actor's")
    reload_protocol: Literal["builtin", "sglang", "vllm"] = Field(
        "builtin", description="Policy server weight sync: rlguard policy serve | SGLang | vLLM (dev API)"
    )
    reload_timeout_s: float = Field(120.0, gt=0)


class TrainerEnv(BaseSettings):
    """The trainer's share of the ``RLGUARD_*`` environment (``RLGUARD_TRAINER__...``)."""

    model_config = SettingsConfigDict(env_prefix="RLGUARD_", env_nested_delimiter="__", extra="ignore")

    trainer: TrainerSettings = Field(default_factory=TrainerSettings)
