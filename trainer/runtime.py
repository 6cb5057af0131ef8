"""Where and how training runs: device, precision, processes, model wrapping, RNG state.

One process per device under ``torchrun`` (NCCL on CUDA, gloo on the CPU), plain single-process
otherwise. CUDA trains in bf16 autocast with fp32 master weights; the CPU in fp32. Models are wrapped
with DDP (replicated) or FSDP2 (``fully_shard``: each transformer block sharded, then the root).
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    rank: int = 0
    world_size: int = 1
    parallel: Literal["ddp", "fsdp"] = "ddp"

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast on CUDA; nothing on the CPU (fp32 there is both faster and exact)."""
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def all_reduce_sum(self, value: float) -> float:
        """Sum of ``value`` over ranks (itself when single-process)."""
        if not self.distributed:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self._collective_device())
        dist.all_reduce(tensor)
        return float(tensor.item())

    def all_reduce_max(self, value: int) -> int:
        if not self.distributed:
            return value
        tensor = torch.tensor([value], dtype=torch.long, device=self._collective_device())
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def _collective_device(self) -> torch.device:
        return self.device if dist.get_backend() == "nccl" else torch.device("cpu")


def init_runtime(parallel: Literal["ddp", "fsdp"] = "ddp", device: str | None = None) -> Runtime:
    """Join the ``torchrun`` process group when there is one; pick CUDA when present."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available() and device != "cpu"
    if world_size > 1:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if cuda else "gloo")
        if cuda:
            torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
        return Runtime(dev, dist.get_rank(), world_size, parallel)
    dev = torch.device(device) if device else torch.device("cuda" if cuda else "cpu")
    return Runtime(dev, 0, 1, parallel)


def shutdown_runtime(runtime: Runtime) -> None:
    if runtime.distributed and dist.is_initialized():
        dist.destroy_process_group()


def _block_classes(model: nn.Module) -> tuple[type[nn.Module], ...]:
    """The transformer block classes (HF ``_no_split_modules``) that FSDP2 shards one by one."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or [])
    return tuple({type(m) for m in model.modules() if type(m).__name__ in names})


def wrap_model(model: nn.Module, runtime: Runtime) -> nn.Module:
    """Move to the device and, under ``torchrun``, replicate (DDP) or shard (FSDP2) it."""
    model = model.to(runtime.device)
    if not runtime.distributed:
        return model
    if runtime.parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        blocks = _block_classes(model)
        for module in model.modules():
            if blocks and isinstance(module, blocks):
                fully_shard(module)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [runtime.device.index] if runtime.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def unwrap(model: nn.Module) -> nn.Module:
    """The user module under a DDP wrapper (FSDP2 wraps in place, so it is the module itself)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def rng_state() -> dict[str, Any]:
    """Every RNG a training step may draw from, for exact resume."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def no_grad_eval(*models: nn.Module) -> Iterator[None]:
    """Inference mode for a scoring pass, restoring each model's train/eval flag afterwards."""
    modes = [m.training for m in models]
    for m in models:
        m.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, mode in zip(models, modes, strict=True):
            m.train(mode)
