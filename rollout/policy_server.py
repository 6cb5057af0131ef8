"""``rlguard policy serve``: an OpenAI-compatible server over a HF causal LM (CPU or CUDA).

It speaks the subset of the vLLM/SGLang dialect an RL rollout needs: ``/v1/completions`` with a
string or token-id prompt that returns token ids (``return_token_ids``, vLLM >= 0.10.2 shape:
``choices[].token_ids`` / ``choices[].prompt_token_ids``) and logprobs; ``/v1/chat/completions`` with
Hermes/Qwen tool calls; ``/v1/models``; weight reload from disk (``/reload_weights`` and SGLang's
``/update_weights_from_disk``) so the trainer can push a new checkpoint; ``/health``. The reload
endpoints are control endpoints: they need the run's bearer token and read only directories under
the run's checkpoint folder (``rollout.control``); without a token configured they refuse everyone.
One model, one lock, and a batcher: the requests that queue while a batch generates are generated
together in the next one (up to ``max_batch`` requests and ``max_batch_tokens`` padded prompt
tokens), which is how vLLM and SGLang keep many concurrent episodes cheap.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from rollout.chat_format import ParsedCall, parse_tool_calls
from rollout.control import REFUSED_LOAD, REFUSED_PATH, UNAUTHORIZED, ReloadControl
from rollout.hf_engine import EngineOutput, GenerationRequest, HFEngine
from rollout.settings import PolicyServerSettings

log = logging.getLogger(__name__)


class BadRequest(Exception):
    """A request the server refuses with 400 and this message."""


class Unauthorized(Exception):
    """A control request without this server's token: one 401, the same for every cause."""


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = 1
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    logprobs: int | None = Field(None, ge=0, le=20)
    seed: int | None = None
    echo: bool = False
    stream: bool = False
    return_token_ids: bool = False


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = 1
    stop: str | list[str] | None = None
    logprobs: bool = False
    seed: int | None = None
    stream: bool = False


class ReloadRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    path: str | None = Field(None, max_length=4096)
    model_path: str | None = Field(None, max_length=4096)  # SGLang's /update_weights_from_disk shape
    version: str | None = Field(None, max_length=64, pattern=r"^[\w.+:-]+$")


class PolicyServer:
    """The engine, its lock, and the limits; ``app`` is the FastAPI application."""

    def __init__(
        self,
        engine: HFEngine,
        name: str,
        limits: PolicyServerSettings,
        control: ReloadControl | None = None,
    ) -> None:
        self.engine = engine
        self.name = name
        self.limits = limits
        #: Who may reload weights and from where; None: nobody (every control request is a 401).
        self.control = control
        self.version = "0"
        self.reloads = 0
        self.lock = asyncio.Lock()
        self.reload_lock = asyncio.Lock()
        self.batches = 0
        self._pending: list[tuple[GenerationRequest, asyncio.Future[tuple[EngineOutput, str]]]] = []
        self._batcher: asyncio.Task[None] | None = None
        self.app = self._build_app()

    # -- helpers -----------------------------------------------------------------------------------

    def _prompt_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list | str):
            if len(prompt) != 1:
                raise BadRequest("batched prompts are not supported; send one prompt per request")
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = self.engine.tokenizer.encode(prompt, add_special_tokens=False)
        else:
            ids = list(prompt)
        if not ids:
            raise BadRequest("the prompt is empty")
        vocab = self.engine.model.config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise BadRequest(f"prompt token ids out of range [0, {vocab}): {bad[:5]}")
        return ids

    def _check_limits(self, n_prompt: int, max_tokens: int, n: int) -> None:
        if n != 1:
            raise BadRequest("n must be 1")
        limits = self.limits
        if max_tokens > limits.max_tokens_limit:
            raise BadRequest(f"max_tokens={max_tokens} exceeds this server's limit {limits.max_tokens_limit}")
        if n_prompt > limits.max_prompt_tokens:
            raise BadRequest(f"the prompt has {n_prompt} tokens; the limit is {limits.max_prompt_tokens}")
        if n_prompt + max_tokens > self.engine.max_model_len:
            raise BadRequest(
                f"prompt ({n_prompt}) + max_tokens ({max_tokens}) exceeds the model's context "
                f"length {self.engine.max_model_len}"
            )

    async def _generate(self, prompt_ids: list[int], **kwargs: Any) -> tuple[EngineOutput, str]:
        """The generation and the version of the weights that produced it (read under the lock, so a
        reload waits for the batch in flight and never relabels it)."""
        done: asyncio.Future[tuple[EngineOutput, str]] = asyncio.get_running_loop().create_future()
        self._pending.append((GenerationRequest(prompt_ids, **kwargs), done))
        if self._batcher is None or self._batcher.done():
            self._batcher = asyncio.create_task(self._serve_batches())
        return await done

    def _next_batch(self) -> list[tuple[GenerationRequest, asyncio.Future[tuple[EngineOutput, str]]]]:
        """The oldest pending requests that fit the batch limits (at least one, however long)."""
        batch: list[tuple[GenerationRequest, asyncio.Future[tuple[EngineOutput, str]]]] = []
        width = 0
        for item in self._pending:
            width = max(width, len(item[0].prompt_ids))
            if batch and (
                len(batch) >= self.limits.max_batch or width * (len(batch) + 1) > self.limits.max_batch_tokens
            ):
                break
            batch.append(item)
        del self._pending[: len(batch)]
        return [(request, done) for request, done in batch if not done.cancelled()]

    async def _serve_batches(self) -> None:
        """Generate batches until nothing is pending (then the task ends; the next request starts one)."""
        while self._pending:
            batch = self._next_batch()
            if not batch:
                continue
            async with self.lock:
                try:
                    outputs = await asyncio.to_thread(self.engine.generate_batch, [r for r, _ in batch])
                except Exception as exc:  # every request of the batch gets the error
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                    continue
                version = self.version
                self.batches += 1
            for (_, done), output in zip(batch, outputs, strict=True):
                if not done.done():
                    done.set_result((output, version))

    def _token_strings(self, ids: list[int]) -> list[str]:
        return [self.engine.tokenizer.decode([t], skip_special_tokens=False) for t in ids]

    # -- endpoints ---------------------------------------------------------------------------------

    async def completions(self, req: CompletionRequest) -> dict[str, Any]:
        if req.stream or req.echo:
            raise BadRequest("stream=true and echo=true are not supported")
        prompt_ids = self._prompt_ids(req.prompt)
        self._check_limits(len(prompt_ids), req.max_tokens, req.n)
        stop = [req.stop] if isinstance(req.stop, str) else req.stop
        out, version = await self._generate(
            prompt_ids,
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            stop_token_ids=req.stop_token_ids,
            stop=stop,
            top_logprobs=req.logprobs or 0,
        )
        tokenizer = self.engine.tokenizer
        text = tokenizer.decode(out.token_ids, skip_special_tokens=True)
        if stop:
            cut = min((text.find(s) for s in stop if s in text), default=-1)
            text = text[:cut] if cut >= 0 else text
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": out.finish_reason}
        if req.logprobs is not None:
            tokens = self._token_strings(out.token_ids)
            offsets, pos = [], 0
            for tok in tokens:
                offsets.append(pos)
                pos += len(tok)
            top = None
            if out.top_logprobs is not None:
                top = [{tokenizer.decode([i]): v for i, v in d.items()} for d in out.top_logprobs]
            choice["logprobs"] = {
                "tokens": tokens,
                "token_logprobs": out.logprobs,
                "top_logprobs": top,
                "text_offset": offsets,
            }
        if req.return_token_ids:
            choice["token_ids"] = out.token_ids
            choice["prompt_token_ids"] = prompt_ids
        sizes = (len(prompt_ids), len(out.token_ids))
        return self._envelope("cmpl", "text_completion", choice, *sizes, version)

    async def chat(self, req: ChatRequest) -> dict[str, Any]:
        if req.stream:
            raise BadRequest("stream=true is not supported")
        tokenizer = self.engine.tokenizer
        try:
            text = tokenizer.apply_chat_template(
                req.messages, tools=req.tools or None, add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:  # a template error is the client's malformed message list
            raise BadRequest(f"cannot render the messages with the chat template: {exc}") from exc
        prompt_ids = tokenizer.encode(text, add_special_tokens=False)
        max_tokens = req.max_completion_tokens or req.max_tokens or 512
        self._check_limits(len(prompt_ids), max_tokens, req.n)
        stop = [req.stop] if isinstance(req.stop, str) else req.stop
        out, version = await self._generate(
            prompt_ids, max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p,
            seed=req.seed, stop=stop,
        )  # fmt: skip
        generated = tokenizer.decode(out.token_ids, skip_special_tokens=True)
        calls = [c for c in parse_tool_calls(generated) if isinstance(c, ParsedCall)] if req.tools else []
        content = generated.split("<tool_call>")[0].strip() if calls else generated
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in calls
            ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if calls else out.finish_reason,
        }
        if req.logprobs:
            choice["logprobs"] = {
                "content": [
                    {"token": s, "logprob": lp}
                    for s, lp in zip(self._token_strings(out.token_ids), out.logprobs, strict=True)
                ]
            }
        return self._envelope(
            "chatcmpl", "chat.completion", choice, len(prompt_ids), len(out.token_ids), version
        )

    def _envelope(
        self,
        id_prefix: str,
        kind: str,
        choice: dict[str, Any],
        prompt_tokens: int,
        completion_tokens: int,
        version: str,
    ) -> dict[str, Any]:
        """The OpenAI response around one choice, plus the ``policy_version`` that generated it."""
        return {
            "id": f"{id_prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": self.name,
            "policy_version": version,
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    async def reload(self, req: ReloadRequest, request: Request) -> dict[str, Any]:
        """Serve the checkpoint at ``path`` under ``version``: the run's trainer only (module docstring)."""
        control = self.control
        if control is None or not control.authorized(request.headers.get("authorization")):
            raise Unauthorized
        path = req.path or req.model_path
        if not path:
            raise BadRequest('give the checkpoint directory as "path" (or "model_path")')
        directory = control.checkpoint(path)
        if directory is None:
            raise BadRequest(REFUSED_PATH)
        async with self.reload_lock:  # one reload at a time; generation goes on while it loads
            try:
                prepared = await asyncio.to_thread(self.engine.prepare, directory, True)
            except Exception as exc:  # a bad checkpoint of any kind is the caller's 4xx
                log.warning("reload refused: %s", type(exc).__name__)
                raise BadRequest(REFUSED_LOAD) from None
            async with self.lock:  # the swap waits for the generation in flight, then is instant
                self.engine.install(prepared)
                self.reloads += 1
                self.version = req.version or str(self.reloads)
                version = self.version
        return {"success": True, "message": "loaded", "version": version}

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "rlguard",
                    "root": self.name,  # never a host path
                    "max_model_len": self.engine.max_model_len,
                    "version": self.version,
                }
            ],
        }

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="rlguard policy server")

        def error(status: int, message: str) -> JSONResponse:
            kind = {400: "BadRequestError", 401: "AuthenticationError"}.get(status, "NotFoundError")
            return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status)

        @app.exception_handler(BadRequest)
        async def _bad_request(_: Request, exc: BadRequest) -> JSONResponse:
            return error(400, str(exc))

        @app.exception_handler(Unauthorized)
        async def _unauthorized(_: Request, exc: Unauthorized) -> JSONResponse:
            answer = error(401, UNAUTHORIZED)
            answer.headers["WWW-Authenticate"] = "Bearer"
            return answer

        @app.exception_handler(RequestValidationError)
        async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
            parts = [f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors()]
            return error(400, "; ".join(parts) or "invalid request")

        app.post("/v1/completions")(self.completions)
        app.post("/v1/chat/completions")(self.chat)
        app.post("/reload_weights")(self.reload)
        app.post("/update_weights_from_disk")(self.reload)
        app.get("/v1/models")(self.models)

        @app.get("/health")
        async def _health() -> dict[str, str]:
            return {"status": "ok", "version": self.version}

        return app


def build_server(
    model: str | Path,
    device: str = "cpu",
    limits: PolicyServerSettings | None = None,
    name: str | None = None,
    control: ReloadControl | None = None,
) -> PolicyServer:
    """The server for the HF model directory ``model``, served as ``name`` (default: the directory's);
    ``control``: the run's token and checkpoint folder (None: reload endpoints refuse everyone)."""
    path = Path(model)
    return PolicyServer(HFEngine(path, device), name or path.name, limits or PolicyServerSettings(), control)
