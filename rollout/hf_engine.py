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
class GenerationRequest:
    """One prompt to generate for and how (see :meth:`HFEngine.generate`)."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    stop: list[str] | None = None
    top_logprobs: int = 0


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

    def _load(self, path: Path, safetensors_only: bool = False):  # -> (tokenizer, model)
        """Tokenizer and model of a HF directory; ``safetensors_only`` refuses pickled weights
        (``*.bin``) outright, as a reload of a checkpoint written by someone else must."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not (path / "config.json").is_file():
            raise ValueError(f"{path} is not a HF model directory (no config.json)")
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        options: dict[str, Any] = {"dtype": dtype, "trust_remote_code": False}
        if safetensors_only:
            options["use_safetensors"] = True
        model = AutoModelForCausalLM.from_pretrained(path, **options).to(self.device).eval()
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

    def prepare(self, path: Path | str, safetensors_only: bool = False) -> tuple[Path, Any, Any]:
        """Load a HF directory without touching the serving model (the slow half of a reload, which
        a server can run while it keeps generating); :meth:`install` swaps it in."""
        path = Path(path)
        tokenizer, model = self._load(path, safetensors_only)
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
        return self.generate_batch([GenerationRequest(prompt_ids, max_tokens, **kwargs)])[0]

    def generate_batch(self, requests: list[GenerationRequest]) -> list[EngineOutput]:
        """Generate for several prompts in one batch, each with its own sampling, seed and stops.

        Why: a forward pass of a small model costs about the same for one row as for eight (on a CPU
        it is mostly per-call overhead), so a server that batches the requests that queued up serves
        several episodes for the price of one, as vLLM and SGLang do. Prompts are left-padded under
        an attention mask with per-row positions, so each row's tokens and logprobs are those of the
        row generated alone (up to float rounding); a row that finished is carried along until the
        last one does.
        """
        if not requests:
            return []
        with _cpu_threads(self._threads):
            return self._generate_batch(requests)

    @torch.inference_mode()
    def _generate_batch(self, requests: list[GenerationRequest]) -> list[EngineOutput]:
        rows = len(requests)
        width = max(len(r.prompt_ids) for r in requests)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((rows, width), pad, dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.long)
        for row, request in enumerate(requests):
            ids[row, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
            mask[row, width - len(request.prompt_ids) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        ids, mask, positions = ids.to(self.device), mask.to(self.device), positions.to(self.device)
        generators = []
        for request in requests:
            generator = torch.Generator(device=self.device)
            seed = request.seed if request.seed is not None else int.from_bytes(os.urandom(6), "little")
            generators.append(generator.manual_seed(seed))
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache, logits = _cache_of(out), out.logits[:, -1].float()
        position = positions[:, -1:]
        outputs: list[EngineOutput | None] = [None] * rows
        generated: list[list[int]] = [[] for _ in requests]
        logprobs: list[list[float]] = [[] for _ in requests]
        tops: list[list[dict[int, float]]] = [[] for _ in requests]
        stops = [set(self.eos_token_ids) | set(r.stop_token_ids or []) for r in requests]
        while True:
            logp = torch.log_softmax(logits, dim=-1)
            step = torch.full((rows, 1), pad, dtype=torch.long)
            for row, request in enumerate(requests):
                if outputs[row] is not None:
                    continue  # finished: fed padding until the others are done
                token = self._sample(logits[row], request.temperature, request.top_p, generators[row])
                generated[row].append(token)
                logprobs[row].append(float(logp[row, token]))
                if request.top_logprobs:
                    values, indices = torch.topk(logp[row], request.top_logprobs)
                    tops[row].append({int(i): float(v) for i, v in zip(indices, values, strict=True)})
                finish = None
                if token in stops[row] or (request.stop and self._hits_stop(generated[row], request.stop)):
                    finish = "stop"
                elif len(generated[row]) >= request.max_tokens:
                    finish = "length"
                if finish is not None:
                    top = tops[row] if request.top_logprobs else None
                    outputs[row] = EngineOutput(generated[row], logprobs[row], top, finish)
                step[row, 0] = token
            if all(o is not None for o in outputs):
                return [o for o in outputs if o is not None]
            mask = torch.cat([mask, torch.ones((rows, 1), dtype=torch.long, device=self.device)], dim=-1)
            position = position + 1
            out = self.model(
                input_ids=step.to(self.device),
                attention_mask=mask,
                position_ids=position,
                use_cache=True,
                **{_CACHE_ARG: cache},
            )
            cache, logits = _cache_of(out), out.logits[:, -1].float()

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
