"""Actor, critic and reference models, and the per-token quantities PPO reads from them.

Alignment convention (shared with ``trainer.advantages``): for a row of token ids ``x``,
``logprobs[:, t] = log pi(x_t | x_<t)`` and ``values[:, t] = V(x_<t)``, the value of the state in
which token ``t`` is produced; position 0 (always a prompt token) gets 0 for both. ``final_values``
is ``V(x)`` over the whole row (the state after its last token), used to bootstrap truncated
episodes.
"""

from __future__ import annotations

import types
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, PreTrainedModel

VALUE_HEAD_FILE = "value_head.safetensors"


def load_actor(path: str | Path, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """Any HF causal LM from a local directory (never the hub), its LM head kept in fp32."""
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True)
    return fp32_lm_head(model)


def _fp32_linear_forward(self: nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        weight = self.weight.float()
        bias = None if self.bias is None else self.bias.float()
        return torch.nn.functional.linear(hidden.float(), weight, bias)


def fp32_lm_head(model: PreTrainedModel) -> PreTrainedModel:
    """Compute the LM head (hidden -> vocabulary logits) in fp32 even under bf16 autocast.

    Why: a logprob is a difference of two large logits (the token's and the log-sum-exp over the
    vocabulary); in bf16 (8 bits of mantissa) that difference is off by up to ~0.1 nat for a 150k
    vocabulary, which goes straight into PPO's ratio and into the train-inference gap. The rest of
    the model keeps autocast. The head's ``forward`` is replaced on this instance only: parameter
    names, saving in HF format, weight tying and DDP/FSDP wrapping are unchanged.
    """
    head = model.get_output_embeddings()
    if isinstance(head, nn.Linear):
        head.forward = types.MethodType(_fp32_linear_forward, head)
    return model


def load_reference(path: str | Path, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """A frozen copy of the starting policy for the KL term."""
    model = load_actor(path, dtype)
    model.requires_grad_(False)
    return model.eval()


class Critic(nn.Module):
    """A transformer backbone with a scalar value head on every position.

    The backbone is the actor's architecture (or a smaller model of the same tokenizer) loaded
    without its LM head; the head starts at zero so the untrained critic predicts 0 everywhere
    instead of noise that GAE would turn into spurious advantages.
    """

    def __init__(self, backbone: PreTrainedModel) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(backbone.config.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32) -> Critic:
        """Backbone from ``path``; the value head too when ``path`` is a saved critic."""
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
        backbone = AutoModel.from_pretrained(str(path), config=config, dtype=dtype, local_files_only=True)
        critic = cls(backbone)
        head = Path(path) / VALUE_HEAD_FILE
        if head.is_file():
            critic.value_head.load_state_dict(load_file(str(head)))
        return critic.to(dtype)

    def save_pretrained(self, path: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """HF backbone files plus ``value_head.safetensors``; ``state_dict`` overrides (FSDP full state)."""
        path = Path(path)
        state = state_dict if state_dict is not None else self.state_dict()
        backbone_state = {
            k.removeprefix("backbone."): v for k, v in state.items() if k.startswith("backbone.")
        }
        head_state = {
            k.removeprefix("value_head."): v.contiguous() for k, v in state.items() if "value_head." in k
        }
        self.backbone.save_pretrained(path, state_dict=backbone_state, safe_serialization=True)
        save_file(head_state, str(path / VALUE_HEAD_FILE))

    def gradient_checkpointing_enable(self) -> None:
        self.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(values [B, T], final_values [B])`` aligned as the module docstring says, in fp32."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        raw = self.value_head(hidden.last_hidden_state).squeeze(-1).float()
        values = torch.cat([torch.zeros_like(raw[:, :1]), raw[:, :-1]], dim=1)
        last = attention_mask.sum(dim=1).clamp(min=1) - 1
        final_values = raw.gather(1, last.unsqueeze(1)).squeeze(1)
        return values, final_values


def token_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(logprobs [B, T], entropy [B, T] | None)`` of each token under ``model``, aligned to the token.

    ``temperature``: the distribution the rollout *sampled* from is ``softmax(logits / T)``, so that
    is the one whose logprobs (and entropy) PPO's ratio and the importance weights must compare;
    scoring at T = 1 data sampled at T != 1 biases the gradient. (Top-p truncation is not applied:
    keep ``top_p = 1`` for training data.)

    ``log_softmax`` is taken as ``logit - logsumexp`` on the gathered token only, so no second
    ``[B, T, V]`` tensor is materialised, and the one-position shift is applied to the small
    ``[B, T]`` results rather than to the logits (slicing the logits would make autograd build a
    full-size zero tensor in the backward). The entropy (a metric, or a bonus when
    ``entropy_grad``) reuses the same ``logsumexp`` and stays off the graph unless its gradient is
    wanted.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    next_ids = torch.cat([input_ids[:, 1:], input_ids[:, -1:]], dim=1).unsqueeze(-1)
    normaliser = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(-1, next_ids).squeeze(-1) - normaliser
    logprobs = torch.cat([torch.zeros_like(picked[:, :1]), picked[:, :-1]], dim=1)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            source, lse = (logits, normaliser) if entropy_grad else (logits.detach(), normaliser.detach())
            probs = torch.exp(source - lse.unsqueeze(-1))
            ent = lse - (probs * source).sum(dim=-1)
        entropy = torch.cat([torch.zeros_like(ent[:, :1]), ent[:, :-1]], dim=1)
    return logprobs, entropy
