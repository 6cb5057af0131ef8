"""vLLM worker extension that receives weights from the trainer over NCCL (GPU only).

Loaded *inside vLLM's worker processes*: start vLLM with
``--worker-extension-cls rollout.vllm_extension.WeightUpdateExtension`` (rlguard installed in the
image) and ``VLLM_SERVER_DEV_MODE=1``; the trainer side is ``trainer.weight_broadcast``. The methods
are called through ``POST /collective_rpc`` with JSON arguments only (names, dtype names, shapes),
never pickles. Mirrors vLLM's ``examples/offline_inference/rlhf_utils.py``.
"""

from __future__ import annotations

from typing import Any


class WeightUpdateExtension:
    """Mixed into vLLM's worker class: ``self.device`` and ``self.model_runner`` are the worker's."""

    device: Any
    model_runner: Any

    def init_weight_update_group(
        self, master_address: str, master_port: int, rank_offset: int, world_size: int
    ) -> None:
        """Join the trainer's NCCL group as rank ``world rank + rank_offset``."""
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.parallel_state import get_world_group
        from vllm.distributed.utils import StatelessProcessGroup

        rank = get_world_group().rank + int(rank_offset)
        group = StatelessProcessGroup.create(
            host=master_address, port=int(master_port), rank=rank, world_size=int(world_size)
        )
        self.weight_update_group = PyNcclCommunicator(group, device=self.device)

    def update_weight(self, name: str, dtype: str, shape: list[int]) -> None:
        """Receive one tensor broadcast from the trainer (rank 0) and load it under its HF name."""
        import torch

        weight = torch.empty(tuple(shape), dtype=getattr(torch, dtype), device="cuda")
        self.weight_update_group.broadcast(weight, src=0, stream=torch.cuda.current_stream())
        self.model_runner.model.load_weights(weights=[(name, weight)])
        del weight
