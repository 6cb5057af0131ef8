"""GPU-only weight sync: the trainer's tensors go to vLLM's workers over NCCL, with no disk round trip.

Written for a GPU machine and not run by the CPU test suite (NCCL needs CUDA devices on both sides).
The pattern is vLLM's own RLHF one (``examples/offline_inference/rlhf.py`` / ``rlhf_utils.py``):

1. vLLM is started with ``--worker-extension-cls rollout.vllm_extension.WeightUpdateExtension`` and
   ``VLLM_SERVER_DEV_MODE=1`` (for ``POST /collective_rpc``), rlguard installed in its image.
2. :meth:`NcclWeightBroadcast.connect`: the trainer (rank 0) and every vLLM worker (ranks
   ``1..world_size-1``) join one ``StatelessProcessGroup`` + ``PyNcclCommunicator``; the workers do
   it inside ``init_weight_update_group``, called through ``/collective_rpc`` while the trainer joins
   from its side (both block until everyone is in).
3. :meth:`NcclWeightBroadcast.push`: per parameter, the workers are told (``update_weight`` with the
   name, dtype and shape as JSON) to receive, and the trainer broadcasts the tensor from rank 0; each
   worker hands it to ``model.load_weights`` (vLLM's loader maps HF names, fuses q/k/v, shards for
   tensor parallelism). Then ``/reset_prefix_cache``; the version is recorded as in ``trainer.reload``.

``collective_rpc`` answers only when every worker returned, so each call runs in a thread while the
trainer takes part in the collective from the main thread.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import torch
from torch import nn

from trainer.errors import TrainerError
from trainer.reload import server_root

EXTENSION = "rollout.vllm_extension.WeightUpdateExtension"


class NcclWeightBroadcast:
    """A ``WeightSync`` that broadcasts an in-memory model's parameters to vLLM over NCCL (GPU only)."""

    def __init__(
        self,
        url: str,
        model: nn.Module,
        master_address: str,
        master_port: int,
        vllm_world_size: int,
        timeout_s: float = 600.0,
    ) -> None:
        self.root = server_root(url)
        self.model = model
        self.master_address = master_address
        self.master_port = master_port
        self.world_size = vllm_world_size + 1
        self.timeout_s = timeout_s
        self._version = "0"
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._comm: Any = None

    def _rpc(self, method: str, *args: Any) -> Any:
        body = {"method": method, "args": list(args), "timeout": self.timeout_s}
        response = httpx.post(f"{self.root}/collective_rpc", json=body, timeout=self.timeout_s)
        if response.status_code >= 400:
            raise TrainerError(f"vLLM refused collective_rpc {method}: {response.text[:300]}")
        return response.json() if response.content else None

    def connect(self) -> None:
        """Form the NCCL group with every vLLM worker (the trainer is rank 0)."""
        if not torch.cuda.is_available():
            raise TrainerError("the NCCL weight broadcast needs CUDA on the trainer's side")
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        joined = self._pool.submit(
            self._rpc, "init_weight_update_group", self.master_address, self.master_port, 1, self.world_size
        )
        group = StatelessProcessGroup.create(
            host=self.master_address, port=self.master_port, rank=0, world_size=self.world_size
        )
        self._comm = PyNcclCommunicator(group, device=torch.device("cuda", torch.cuda.current_device()))
        joined.result()

    def push(self, checkpoint: Path, version: str) -> dict[str, Any]:
        """Broadcast every parameter (``checkpoint`` is not read: the weights come from memory)."""
        if self._comm is None:
            self.connect()
        count = 0
        for name, tensor in self.model.state_dict().items():
            dtype = str(tensor.dtype).removeprefix("torch.")
            received = self._pool.submit(self._rpc, "update_weight", name, dtype, list(tensor.shape))
            self._comm.broadcast(
                tensor.detach().cuda().contiguous(), src=0, stream=torch.cuda.current_stream()
            )
            received.result()
            count += 1
        httpx.post(f"{self.root}/reset_prefix_cache", timeout=self.timeout_s).raise_for_status()
        with self._lock:
            self._version = version
        return {"success": True, "message": f"broadcast {count} tensors", "version": version}

    def current_version(self) -> str:
        with self._lock:
            return self._version
