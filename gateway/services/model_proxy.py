"""The recording model proxy: each episode's OpenAI-compatible model endpoint on the gateway.

A harness that keeps its own agent loop points its model base URL at
``/v1/episodes/{id}/model/v1`` (the episode's agent token as its API key). Each chat or text
completion is turned into token ids (:mod:`gateway.services.chat_render`), stitched onto the
episode's context (:mod:`gateway.services.recording`), sampled by the policy server with exact ids
and logprobs (:mod:`gateway.services.policy_upstream`) and answered in OpenAI's format
(:mod:`gateway.services.openai_wire`). The turns live in memory with their episode and are written
as sub-trajectories when the episode ends (the finisher calls :meth:`ModelProxy.end` before it
stores the outcome, so the trainer, which reads only ended episodes, never sees half an episode).

Turns of one episode are serialised (one conversation); episodes run concurrently. Model turns
count as activity, so a long generation does not let the idle sweep end its episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.core.dbrunner import DbRunner
from gateway.services.call_matching import match_calls
from gateway.services.chat_render import ChatRenderer, RenderError, normalize_messages
from gateway.services.live import LiveEpisode, LiveEpisodes
from gateway.services.openai_wire import ChatRequest, CompletionRequest, chat_answer, completion_answer
from gateway.services.policy_upstream import PolicyUpstream, UpstreamError
from gateway.services.recording import Recording, RecordingFull
from gateway.settings import GatewaySettings
from rollout.tinymodel import TINY
from store.codec import encode_action_mask, encode_logprobs, encode_token_ids
from store.models import SubTrajectoryRow, utcnow

log = logging.getLogger("gateway.model_proxy")

END_WAIT_S = 30.0  # how long an ending episode waits for a model turn in flight
INLINE_RENDER_CHARS = 64 * 1024  # conversations up to this much text are rendered on the event loop


class ProxyError(Exception):
    """A proxied turn that failed; ``status`` is the HTTP status the harness gets."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ProxyAnswer:
    body: dict[str, Any]
    stream: bool
    include_usage: bool


class ModelProxy:
    """Per-episode recordings, one tokenizer and one client of the policy server."""

    def __init__(self, settings: GatewaySettings, state_dir: Path, live: LiveEpisodes, db: DbRunner) -> None:
        self.settings = settings
        self.state_dir = state_dir
        self.live = live
        self.db = db
        self.upstream: PolicyUpstream | None = None
        if settings.policy_url:
            key = settings.policy_api_key.get_secret_value() if settings.policy_api_key else None
            self.upstream = PolicyUpstream(
                settings.policy_url, key, settings.proxy_timeout_s, settings.proxy_max_response_bytes
            )
        self._renderer: ChatRenderer | None = None
        self._model: str | None = None
        self._setup = asyncio.Lock()
        self._recordings: dict[str, Recording] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def enabled(self) -> bool:
        return self.upstream is not None

    async def aclose(self) -> None:
        if self.upstream is not None:
            await self.upstream.aclose()

    # -- set-up -----------------------------------------------------------------------------------

    async def ready(self) -> tuple[PolicyUpstream, ChatRenderer, str]:
        """The upstream, the tokenizer and the served model name (loaded once, on first use)."""
        if self.upstream is None:
            raise ProxyError(
                404, "this gateway has no model proxy: set RLGUARD_GATEWAY__POLICY_URL to the policy server"
            )
        if self._renderer is None or self._model is None:
            async with self._setup:
                if self._renderer is None or self._model is None:
                    self._model, self._renderer = await self._load(self.upstream)
        return self.upstream, self._renderer, self._model

    async def _load(self, upstream: PolicyUpstream) -> tuple[str, ChatRenderer]:
        try:
            models = (await upstream.models())["data"]
        except UpstreamError as exc:
            raise ProxyError(502, f"cannot list the policy server's models: {exc}") from exc
        name = self.settings.policy_model or (str(models[0].get("id")) if models else None)
        if not name:
            raise ProxyError(502, "the policy server lists no model; set RLGUARD_GATEWAY__POLICY_MODEL")
        source = self.settings.policy_tokenizer
        if source is None:
            served = next((m for m in models if m.get("id") == name), models[0] if models else {})
            root = served.get("root")
            # vLLM and SGLang name the model's directory; rlguard's own server names only the model
            # ('tiny' is one this gateway can build too), never a host path
            if isinstance(root, str) and Path(root).is_dir():
                source = root
            elif name == TINY or root == TINY:
                source = TINY
            else:
                raise ProxyError(
                    503,
                    f"the policy server does not name a local model directory for {name!r}; set "
                    "RLGUARD_GATEWAY__POLICY_TOKENIZER to the model's HF directory",
                )
        try:
            renderer = await asyncio.to_thread(_load_renderer, source, self.state_dir)
        except (OSError, ValueError) as exc:
            raise ProxyError(503, f"cannot load the policy's tokenizer from {source!r}: {exc}") from exc
        log.info("model proxy ready", extra={"model": name, "tokenizer": source})
        return name, renderer

    def decoder(self) -> Callable[[list[int]], str] | None:
        """Token ids to text for the episode view: the proxy's tokenizer, or the configured one
        (``policy_tokenizer``, loaded here: call it off the event loop); None when there is none."""
        if self._renderer is None and self.settings.policy_tokenizer:
            try:
                self._renderer = _load_renderer(self.settings.policy_tokenizer, self.state_dir)
            except (OSError, ValueError, RenderError):
                log.warning("cannot load the policy tokenizer for the episode view", exc_info=True)
                return None
        return self._renderer.decode if self._renderer is not None else None

    async def models(self) -> dict[str, Any]:
        upstream, _, _ = await self.ready()
        try:
            return await upstream.models()
        except UpstreamError as exc:
            raise ProxyError(exc.status, str(exc)) from exc

    # -- turns ------------------------------------------------------------------------------------

    async def chat(self, episode_id: str, body: Any) -> ProxyAnswer:
        request = _parse(ChatRequest, body)
        upstream, renderer, model = await self.ready()
        live = await self.live.running(episode_id)
        try:
            messages = normalize_messages(request.messages)
        except RenderError as exc:
            raise ProxyError(400, str(exc)) from exc
        async with self._lock(live.id):
            recording = self._recording(live)
            plan = await self._plan(recording.plan_chat, renderer, messages, request.tools)
            sampling = request.sampling(request.wanted_tokens(self.settings.proxy_default_max_tokens))
            generation = await self._generate(live, upstream, model, plan.ids, sampling, renderer)
            reply = renderer.reply(
                generation.token_ids, generation.finish_reason, request.parse_tools, request.stops()
            )
            self._record(recording, plan, generation, reply, reply.content)
        pieces = [renderer.decode([t]) for t in generation.token_ids] if request.logprobs else []
        answer = chat_answer(
            request,
            request.model or model,
            reply,
            pieces,
            generation.logprobs,
            plan.ids,
            generation.token_ids,
        )
        return ProxyAnswer(answer, request.stream, request.include_usage)

    async def complete(self, episode_id: str, body: Any) -> ProxyAnswer:
        request = _parse(CompletionRequest, body)
        if request.echo:
            raise ProxyError(400, "echo is not supported by the recording proxy")
        upstream, renderer, model = await self.ready()
        live = await self.live.running(episode_id)
        async with self._lock(live.id):
            recording = self._recording(live)
            if isinstance(request.prompt, str):
                prompt_ids = renderer.encode(request.prompt)
            else:
                prompt_ids = list(request.prompt)
            if not prompt_ids:
                raise ProxyError(400, "the prompt is empty")
            try:
                plan = recording.plan_completion(prompt_ids)
            except RecordingFull as exc:
                raise ProxyError(409, str(exc)) from exc
            sampling = request.sampling(request.max_tokens or self.settings.proxy_default_max_tokens)
            generation = await self._generate(live, upstream, model, plan.ids, sampling, renderer)
            text = renderer.text(generation.token_ids, request.stops())
            self._record(recording, plan, generation, None, text)
        pieces = [renderer.decode([t]) for t in generation.token_ids] if request.logprobs is not None else []
        answer = completion_answer(
            request, request.model or model, text, generation.finish_reason, pieces, generation.logprobs,
            plan.ids, generation.token_ids,
        )  # fmt: skip
        return ProxyAnswer(answer, request.stream, request.include_usage)

    def _lock(self, episode_id: str) -> asyncio.Lock:
        return self._locks.setdefault(episode_id, asyncio.Lock())

    def _recording(self, live: LiveEpisode) -> Recording:
        recording = self._recordings.get(live.id)
        if recording is None:
            recording = Recording(live.policy_version, self.settings.proxy_max_turns)
            self._recordings[live.id] = recording
        if recording.closed or live.closed:
            raise ProxyError(409, f"episode {live.id} has ended; it takes no more model turns")
        return recording

    @staticmethod
    async def _plan(plan: Any, renderer: ChatRenderer, messages: list[dict[str, Any]], tools: Any) -> Any:
        """Render and tokenise: on the event loop for the usual conversation (well under a
        millisecond; a thread hop costs a scheduler wake-up, which on a loaded host is the larger
        cost), in a thread for a long one."""
        size = sum(len(m["content"]) for m in messages)
        try:
            if size <= INLINE_RENDER_CHARS:
                return plan(renderer, messages, tools)
            return await asyncio.to_thread(plan, renderer, messages, tools)
        except RenderError as exc:
            raise ProxyError(400, str(exc)) from exc
        except RecordingFull as exc:
            raise ProxyError(409, str(exc)) from exc

    @staticmethod
    async def _generate(
        live: LiveEpisode,
        upstream: PolicyUpstream,
        model: str,
        prompt_ids: list[int],
        sampling: dict[str, Any],
        renderer: ChatRenderer,
    ) -> Any:
        live.last_activity = time.monotonic()
        stops = sorted({*renderer.stop_token_ids, *sampling.pop("stop_token_ids", [])})
        try:
            generation = await upstream.generate(model, prompt_ids, {**sampling, "stop_token_ids": stops})
        except UpstreamError as exc:
            raise ProxyError(exc.status, str(exc)) from exc
        finally:
            live.last_activity = time.monotonic()
        if live.closed:
            raise ProxyError(409, f"episode {live.id} ended while its model turn was generated")
        return generation

    @staticmethod
    def _record(recording: Recording, plan: Any, generation: Any, reply: Any, text: str) -> None:
        try:
            recording.record(
                plan, generation.token_ids, generation.logprobs, generation.version, reply, text,
                generation.seconds * 1000,
            )  # fmt: skip
        except RecordingFull as exc:
            raise ProxyError(409, str(exc)) from exc

    # -- the end of an episode --------------------------------------------------------------------

    async def end(self, live: LiveEpisode) -> dict[str, Any]:
        """Write the episode's recorded turns as sub-trajectories; return what its details keep.

        Called by the finisher for every ending (finish, timeout, shutdown). A turn in flight is
        waited for (up to ``END_WAIT_S``), so a finish racing the last turn keeps it. An episode with
        no sub-trajectory at all (no turn came through the proxy, none was uploaded) is marked
        ``audit_only`` with the reason, which the export reports.
        """
        lock = self._locks.get(live.id)
        recording = self._recordings.get(live.id)
        if recording is not None:
            recording.closed = True
        if lock is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lock.acquire(), END_WAIT_S)
                lock.release()
        self._recordings.pop(live.id, None)
        self._locks.pop(live.id, None)
        existing = await self.db.run(self.db.store.sub_trajectory_count, live.id)
        if recording is None or not recording.turns:
            if existing:
                return {}
            return {"audit_only": self._audit_only_reason(live.id)}
        calls = await self.db.run(self.db.store.calls_of, live.id)
        matching = match_calls(recording.turns, calls)
        rows = _rows(live.id, recording, offset=existing)
        await self.db.run(self.db.store.add_sub_trajectories, rows)
        source = {"model": self._model, "tokenizer": self._renderer.name if self._renderer else None}
        return {"model_proxy": {**recording.summary(), **matching, **source}}

    def _audit_only_reason(self, episode_id: str) -> str:
        if not self.enabled:
            return (
                "no model turn was recorded: this gateway has no model proxy (RLGUARD_GATEWAY__POLICY_URL "
                "is unset) and no sub-trajectory was uploaded"
            )
        return (
            "no model turn was recorded: the harness did not call its model through "
            f"/v1/episodes/{episode_id}/model/v1 and no sub-trajectory was uploaded"
        )


def _parse(model: Any, body: Any) -> Any:
    if not isinstance(body, dict):
        raise ProxyError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ProxyError(400, f"{where}: {first.get('msg', 'invalid')}") from None


def _load_renderer(source: str, state_dir: Path) -> ChatRenderer:
    from transformers import AutoTokenizer

    from rollout.tinymodel import resolve_model_name

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(source, state_dir))
    return ChatRenderer(tokenizer, source)  # named as configured: 'tiny' stays 'tiny', not a host path


def _rows(episode_id: str, recording: Recording, offset: int) -> list[SubTrajectoryRow]:
    turns_by_sub: dict[int, list[dict[str, Any]]] = {}
    for turn in recording.turns:
        turns_by_sub.setdefault(turn.sub_index, []).append(turn.to_json())
    rows = []
    for sub, messages in zip(recording.subs, recording.sub_messages, strict=True):
        rows.append(
            SubTrajectoryRow(
                episode_id=episode_id,
                index=offset + sub.index,
                num_tokens=len(sub),
                token_ids=encode_token_ids(sub.token_ids),
                action_mask=encode_action_mask(sub.action_mask),
                logprobs=encode_logprobs(sub.logprobs),
                policy_version=sub.policy_version,
                version_spans=[list(s) for s in sub.version_spans] if sub.mixed_version else None,
                trainable=True,
                messages=messages,
                turns=turns_by_sub.get(sub.index, []),
                created_at=utcnow(),
            )
        )
    return rows
