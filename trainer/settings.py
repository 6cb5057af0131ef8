"""Trainer settings (embedded in ``rlguard.settings.Settings`` as ``trainer``)."""

from typing import Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Value pretraining (VC-PPO, VAPO): a critic that starts at zero makes every advantage of a long
# episode ~0 before whitening; a few steps that train only the critic (on Monte-Carlo targets,
# ``critic_lam`` 1) give the actor's first update advantages worth following.
DEFAULT_PPO_CRITIC_WARMUP_STEPS = 2


class TrainerSettings(BaseModel):
    """PPO/GRPO hyper-parameters and runtime knobs that operators set without editing code."""

    # algorithm
    algo: str = Field(
        "ppo",
        description="A registered algorithm (trainer.advantages.ALGORITHMS): ppo = GAE + critic; "
        "grpo, rloo, reinforce_pp = critic-free; opd = on-policy distillation from teachers",
    )
    gamma: float = Field(1.0, ge=0, le=1)
    lam: float = Field(1.0, ge=0, le=1, description="The actor's GAE lambda (advantages; verl's default 1)")
    critic_lam: float = Field(
        1.0, ge=0, le=1, description="The critic's GAE lambda (value targets; 1 = Monte-Carlo returns)"
    )
    lam_length_alpha: float | None = Field(
        None, gt=0, description="VAPO's length-adaptive actor lambda 1 - 1/(alpha * L); None = lam"
    )
    chain_subtrajectories: bool = Field(
        True, description="Advantage trace across an episode's sub-trajectories (False: per row)"
    )
    bootstrap_truncated: bool = Field(
        False,
        description="Bootstrap limit endings from the critic, dropping their graded reward (else terminal)",
    )
    clip_low: float = Field(0.2, gt=0, lt=1, description="PPO ratio clip below 1")
    clip_high: float = Field(0.28, gt=0, description="PPO ratio clip above 1 (clip-higher)")
    clip_ratio_c: float = Field(3.0, gt=1, description="Dual-clip bound for negative advantages")
    value_clip: float = Field(0.2, gt=0, description="How far the critic may move per update")
    loss_agg_mode: Literal[
        "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    ] = "token-mean"
    loss_scale_factor: float | None = Field(
        None, gt=0, description="seq-mean-token-sum-norm's constant divisor; None = max_sequence_tokens"
    )
    norm_by_std: bool = Field(True, description="GRPO divides by the group's std (False: Dr.GRPO)")
    min_group_size: int = Field(2, ge=1, description="Smallest task group GRPO/RLOO accept in a step")
    entropy_coef: float = Field(0.0, ge=0)
    kl_coef: float = Field(0.0, ge=0, description="Weight of KL to the reference policy; 0 = no reference")
    kl_estimator: Literal["k1", "k3"] = "k3"
    kl_in_reward: bool = Field(
        False, description="KL shaped into token rewards (default: a loss term, as verl for outcome rewards)"
    )
    normalize_advantages: bool = Field(True, description="Whiten GAE advantages over the batch")
    intercept_penalty: float = Field(
        0.0,
        ge=0,
        description="Reward taken off an episode per call answered with a decoy (0 = the grade as is; "
        "rlguard bench decoy: without a cost, the cheats stage 1 misses keep paying)",
    )
    rollout_temperature: float = Field(
        1.0, gt=0, description="The rollout's sampling temperature: the trainer scores logprobs at it"
    )
    rollout_is: Literal["token", "sequence"] | None = Field(
        "token", description="Importance weights pi_prox/pi_rollout: per token, per episode, or none"
    )
    tis_cap: float = Field(2.0, gt=0, description="Truncation of the importance weights (rollout_is)")
    rollout_rs: Literal["token", "sequence", "geometric"] | None = Field(
        None, description="Reject tokens / episodes whose pi_prox/pi_rollout leaves the thresholds"
    )
    rollout_rs_threshold: float = Field(2.0, gt=0, description="Upper bound of rollout_rs")
    rollout_rs_threshold_lower: float | None = Field(None, gt=0, description="Lower bound; None = 1/upper")
    max_staleness: int | None = Field(
        None, ge=0, description="Versions a token may lag the trainer; older tokens: stale_mode"
    )
    stale_mode: Literal["mask", "drop", "tis"] = Field(
        "mask",
        description="Tokens older than max_staleness: masked from the loss, their episode dropped, or kept",
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
    ppo_mini_batches: int = Field(
        1, ge=1, description="Optimiser steps per epoch (the batch split by episode)"
    )
    critic_warmup_steps: int | None = Field(
        None,
        ge=0,
        description=f"Critic-only steps; None = {DEFAULT_PPO_CRITIC_WARMUP_STEPS} for ppo, else 0",
    )
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

    @field_validator("algo")
    @classmethod
    def _registered_algorithm(cls, name: str) -> str:
        """``algo`` must name a registered algorithm; an unknown one is refused listing the known."""
        from trainer.advantages import ALGORITHMS  # here, not at the top: it imports torch

        return ALGORITHMS.validator()(name)

    def warmup_steps(self) -> int:
        """Critic warm-up steps in effect: the setting, or the algorithm's default when unset."""
        if self.critic_warmup_steps is not None:
            return self.critic_warmup_steps
        return DEFAULT_PPO_CRITIC_WARMUP_STEPS if self.algo == "ppo" else 0

    def scale_factor(self) -> float:
        """``seq-mean-token-sum-norm``'s constant divisor in effect."""
        return float(self.loss_scale_factor or self.max_sequence_tokens)


class TrainerEnv(BaseSettings):
    """The trainer's share of the ``RLGUARD_*`` environment (``RLGUARD_TRAINER__...``)."""

    model_config = SettingsConfigDict(env_prefix="RLGUARD_", env_nested_delimiter="__", extra="ignore")

    trainer: TrainerSettings = Field(default_factory=TrainerSettings)
