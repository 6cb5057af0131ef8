"""A HF transformers causal LM that generates token by token with a KV cache, and scores sequences.

Used by ``rlguard policy serve`` (generation) and by the scripted policy (teacher-forced scoring of
scripted turns). Logprobs are the model's raw log-softmax (temperature 1, before top-p), as vLLM
returns by default: the trainer recomputes logprobs the same way, so the two can be compared.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


def _cache_arg_name() -> str:
    """transformers renamed ``past_key_values`` to ``cache``; accept both releases."""
    import inspect

    from transformers import Qwen2ForCausalLM

    return "cache" if "cache" in inspect.signature(Qwen2ForCausalLM.forward).parameters else "past_key_values"


_CACHE_ARG = _cache_arg_name()


def _cache_of(output) -> object:
    return getattr(output, "cache", None) or output.past_key_values


# Below this size, one CPU thread is faster: intra-op parallelism on tensors this small costs more in
# synchronisation than it gains, and on a loaded machine it made decoding ~10x slower.
SMALL_MODEL_PARAMS = 50_000_000


@contextlib.contextmanager
def _cpu_threads(n: int | None) -> Iterator[None]:
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass
class ScoreCache:
    """KV cache of the token ids one caller scored last, so its next, longer prompt costs only the
    new tokens (a scripted episode's prompts grow by appending)."""

    ids: list[int] = field(default_factory=list)
    cache: Any = None
    last_logits: torch.Tensor | None = None


@dataclass(frozen=True)
class EngineOutput:
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[dict[int, float]] | None
    finish_reason: str  # "stop" | "length"


class HFEngine:
    """One model on one device; callers serialise access (the server holds a lock)."""

    def __init__(self, model_path: Path | str, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError("--device cuda asked for, but torch sees no CUDA device")
        self.device = torch.device(device)
        self._load_lock = threading.Lock()
        self.model_path = Path(model_path)
        self.tokenizer, self.model = self._load(self.model_path)
        small = sum(p.numel() for p in self.model.parameters()) < SMALL_MODEL_PARAMS
        self._threads = 1 if self.device.type == "cpu" and small else None

    def _load(self, path: Path):  # -> (tokenizer, model)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not (path / "config.json").is_file():
            raise ValueError(f"{path} is not a HF model directory (no config.json)")
        tokenizer = AutoTokenizer.from_pretrained(path)
        dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(self.device).eval()
        return tokenizer, model

    @property
    def max_model_len(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 4096))

    @property
    def eos_token_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return [eos] if isinstance(eos, int) else list(eos or [])

    def reload(self, path: Path | str) -> None:
        """Swap in new weights (and tokenizer) from a HF directory; the old model stays on failure."""
        self.install(self.prepare(path))

    def prepare(self, path: Path | str) -> tuple[Path, Any, Any]:
        """Load a HF directory without touching the serving model (the slow half of a reload, which
        a server can run while it keeps generating); :meth:`install` swaps it in."""
        path = Path(path)
        tokenizer, model = self._load(path)
        if len(tokenizer) != len(self.tokenizer):
            raise ValueError(f"{path} has a different vocabulary ({len(tokenizer)} vs {len(self.tokenizer)})")
        return path, tokenizer, model

    def install(self, prepared: tuple[Path, Any, Any]) -> None:
        """Serve what :meth:`prepare` loaded (instant)."""
        path, tokenizer, model = prepared
        with self._load_lock:
            self.tokenizer, self.model, self.model_path = tokenizer, model, path

    def generate(self, prompt_ids: list[int], max_tokens: int, **kwargs: Any) -> EngineOutput:
        """Sample up to ``max_tokens``; stop tokens are kept in the output (as vLLM does for EOS).

        Keyword arguments: ``temperature``, ``top_p``, ``seed``, ``stop_token_ids``, ``stop`` (strings),
        ``top_logprobs`` (how many alternatives to report per token).
        """
        with _cpu_threads(self._threads):
            return self._generate(prompt_ids, max_tokens, **kwargs)

    @torch.inference_mode()
    def _generate(
        self,
        prompt_ids: list[int],
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_token_ids: list[int] | None = None,
        stop: list[str] | None = None,
        top_logprobs: int = 0,
    ) -> EngineOutput:
        stops = set(self.eos_token_ids) | set(stop_token_ids or [])
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed if seed is not None else int.from_bytes(os.urandom(6), "little"))
        out = self.model(input_ids=torch.tensor([prompt_ids], device=self.device), use_cache=True)
        cache, logits = _cache_of(out), out.logits[0, -1]
        ids: list[int] = []
        logprobs: list[float] = []
        tops: list[dict[int, float]] = []
        finish = "length"
        for _ in range(max_tokens):
            logp = torch.log_softmax(logits.float(), dim=-1)
            token = self._sample(logits.float(), temperature, top_p, generator)
            ids.append(token)
            logprobs.append(float(logp[token]))
            if top_logprobs:
                values, indices = torch.topk(logp, top_logprobs)
                tops.append({int(i): float(v) for i, v in zip(indices, values, strict=True)})
            if token in stops or (stop and self._hits_stop(ids, stop)):
                finish = "stop"
                break
            step = torch.tensor([[token]], device=self.device)
            out = self.model(input_ids=step, use_cache=True, **{_CACHE_ARG: cache})
            cache, logits = _cache_of(out), out.logits[0, -1]
        return EngineOutput(ids, logprobs, tops if top_logprobs else None, finish)

    @staticmethod
    def _sample(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
        if temperature <= 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / temperature, dim=-1)
        if top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < top_p
            sorted_probs = sorted_probs * keep
            choice = torch.multinomial(sorted_probs / sorted_probs.sum(), 1, generator=generator)
            return int(order[choice])
        return int(torch.multinomial(probs, 1, generator=generator))

    def _hits_stop(self, ids: list[int], stop: list[str]) -> bool:
        tail = self.tokenizer.decode(ids[-32:], skip_special_tokens=False)
        return any(s in tail for s in stop)

    def score(self, prompt_ids: list[int], target_ids: list[int]) -> list[float]:
        """Logprob of each target token given the prompt and the targets before it (teacher forcing)."""
        with _cpu_threads(self._threads):
            return self._score(prompt_ids, target_ids)

    @torch.inference_mode()
    def _score(self, prompt_ids: list[int], target_ids: list[int]) -> list[float]:
        if not prompt_ids:
            raise ValueError("scoring needs a non-empty prompt")
        if not target_ids:
            return []
        ids = torch.tensor([prompt_ids + target_ids], device=self.device)
        # Only the positions that predict a target need the vocabulary projection.
        keep = len(target_ids) + 1
        logits = self.model(input_ids=ids, logits_to_keep=keep).logits[0, :-1].float()
        logp = torch.log_softmax(logits, dim=-1)
        targets = torch.tensor(target_ids, device=self.device)
        return logp.gather(-1, targets[:, None])[:, 0].tolist()

    def score_cached(self, state: ScoreCache, prompt_ids: list[int], target_ids: list[int]) -> list[float]:
        """``score`` reusing ``state``'s KV cache when ``prompt_ids`` extends what it scored last."""
        with _cpu_threads(self._threads):
            return self._score_cached(state, prompt_ids, target_ids)

    @torch.inference_mode()
    def _score_cached(self, state: ScoreCache, prompt_ids: list[int], target_ids: list[int]) -> list[float]:
        if not prompt_ids:
            raise ValueError("scoring needs a non-empty prompt")
        if not target_ids:
            return []
        full = prompt_ids + target_ids
        n = len(state.ids)
        if n == 0 or n > len(prompt_ids) or full[:n] != state.ids or state.last_logits is None:
            state.ids, state.cache, state.last_logits, n = [], None, None, 0
        new = torch.tensor([full[n:]], device=self.device)
        kwargs = {_CACHE_ARG: state.cache} if state.cache is not None else {}
        out = self.model(input_ids=new, use_cache=True, **kwargs)
        logits = out.logits[0]  # positions n .. len(full)-1
        if n:
            logits = torch.cat([state.last_logits[None], logits])  # positions n-1 .. len(full)-1
        first = len(prompt_ids) - 1 - (n - 1 if n else 0)
        wanted = logits[first : first + len(target_ids)].float()
        state.ids, state.cache, state.last_logits = full, _cache_of(out), out.logits[0, -1]
        logp = torch.log_softmax(wanted, dim=-1)
        targets = torch.tensor(target_ids, device=self.device)
        return logp.gather(-1, targets[:, None])[:, 0].tolist()
