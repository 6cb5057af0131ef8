"""The policy server batches concurrent requests, and a batched row is the row generated alone."""

import asyncio
import math
import threading
from pathlib import Path

import httpx
import pytest

from rollout.hf_engine import GenerationRequest, HFEngine
from rollout.policy_server import PolicyServer
from rollout.serving import serve_in_thread
from rollout.settings import PolicyServerSettings

REQUESTS = [
    GenerationRequest(list(range(5, 45)), 12, temperature=0.0),
    GenerationRequest([7, 8, 9], 20, seed=11),
    GenerationRequest(list(range(30, 150)), 6, seed=5, top_p=0.8, top_logprobs=2),
    GenerationRequest([40, 41, 42, 43, 44], 16, seed=2, temperature=1.3, stop=["a"]),
    GenerationRequest(list(range(60, 70)), 9, temperature=0.0, stop_token_ids=[12, 13, 14, 15]),
]


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> HFEngine:
    return HFEngine(tiny_model_dir)


def _alone(engine: HFEngine, request: GenerationRequest):
    return engine.generate_batch([request])[0]


def test_a_batched_row_equals_the_row_generated_alone(engine: HFEngine) -> None:
    batched = engine.generate_batch(REQUESTS)
    assert len(batched) == len(REQUESTS)
    for request, row in zip(REQUESTS, batched, strict=True):
        alone = _alone(engine, request)
        assert row.token_ids == alone.token_ids
        assert row.finish_reason == alone.finish_reason
        assert row.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
        assert 1 <= len(row.token_ids) <= request.max_tokens
        # The logprobs are the model's own, whatever the padding around the row.
        assert row.logprobs == pytest.approx(engine.score(request.prompt_ids, row.token_ids), abs=1e-4)
        if request.top_logprobs:
            assert row.top_logprobs is not None and len(row.top_logprobs) == len(row.token_ids)
            assert all(len(top) == request.top_logprobs for top in row.top_logprobs)
        else:
            assert row.top_logprobs is None


def test_each_row_stops_on_its_own_stop_and_length(engine: HFEngine) -> None:
    for request, row in zip(REQUESTS, engine.generate_batch(REQUESTS), strict=True):
        stops = set(engine.eos_token_ids) | set(request.stop_token_ids or [])
        text = engine.tokenizer.decode(row.token_ids, skip_special_tokens=False)
        if row.finish_reason == "length":
            assert len(row.token_ids) == request.max_tokens
            assert not set(row.token_ids[:-1]) & stops
        else:
            assert row.token_ids[-1] in stops or any(s in text for s in request.stop or [])


class _GatedEngine(HFEngine):
    """The real engine, except that its first batch waits for the test's word: the other requests
    then queue behind it for certain, whatever the machine's load."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = threading.Event()
        self.first_rows: int | None = None

    def generate_batch(self, requests):
        if self.first_rows is None:
            self.first_rows = len(requests)
            if not self.gate.wait(60):
                raise TimeoutError("the test never opened the gate")
        return super().generate_batch(requests)


async def test_concurrent_http_requests_share_batches_and_get_their_own_answers(
    tiny_model_dir: Path,
) -> None:
    alone_engine = HFEngine(tiny_model_dir)
    engine = _GatedEngine(tiny_model_dir)
    server = PolicyServer(engine, "tiny", PolicyServerSettings(max_batch=3))
    payloads = [
        {
            "prompt": r.prompt_ids,
            "max_tokens": r.max_tokens,
            "temperature": r.temperature,
            "top_p": r.top_p,
            "seed": r.seed if r.seed is not None else 0,
            "logprobs": 0,
            "return_token_ids": True,
        }
        for r in REQUESTS
    ] * 2

    async def open_gate_once_all_queued() -> None:
        while engine.first_rows is None or len(server._pending) < len(payloads) - engine.first_rows:
            await asyncio.sleep(0.01)
        engine.gate.set()

    with serve_in_thread(server.app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            sent = asyncio.gather(*(client.post("/v1/completions", json=p) for p in payloads))
            together, _ = await asyncio.wait_for(asyncio.gather(sent, open_gate_once_all_queued()), 120)
    # The first batch took what had arrived; the rest queued and went three to a batch.
    first = engine.first_rows
    assert first is not None and 1 <= first <= 3
    assert server.batches == 1 + math.ceil((len(payloads) - first) / 3) <= 4
    for index, response in enumerate(together):
        assert response.status_code == 200
        got = response.json()["choices"][0]
        request = REQUESTS[index % 5]
        want = alone_engine.generate_batch(
            [GenerationRequest(request.prompt_ids, request.max_tokens, request.temperature, request.top_p,
                               request.seed if request.seed is not None else 0)]
        )[0]  # fmt: skip
        assert got["token_ids"] == want.token_ids
        assert got["logprobs"]["token_logprobs"] == pytest.approx(want.logprobs, abs=1e-4)


def test_the_batch_token_budget_sends_a_long_prompt_alone(tiny_model_dir: Path) -> None:
    limits = PolicyServerSettings(max_batch=8, max_batch_tokens=100)
    server = PolicyServer(HFEngine(tiny_model_dir), "tiny", limits)

    async def run() -> list[list[int]]:
        short = [server._generate([5, 6, 7], max_tokens=4, seed=1) for _ in range(3)]
        long = server._generate(list(range(5, 95)), max_tokens=4, seed=1)
        results = await asyncio.gather(*short, long)
        return [out.token_ids for out, _ in results]

    outputs = asyncio.run(run())
    assert len(outputs) == 4 and all(1 <= len(ids) <= 4 for ids in outputs)
    # 3 short prompts (3 tokens) fit a batch; adding the 90-token prompt would pad 4 x 90 > 100.
    assert server.batches == 2


class _FailsOnMarker(HFEngine):
    """The real engine, except that a batch holding the marker prompt fails (an engine crash)."""

    marker = (3, 3, 3)

    def generate_batch(self, requests):
        if any(tuple(r.prompt_ids) == self.marker for r in requests):
            raise RuntimeError("engine fault")
        return super().generate_batch(requests)


def test_an_engine_failure_fails_its_batch_only_and_the_server_keeps_serving(tiny_model_dir: Path) -> None:
    server = PolicyServer(_FailsOnMarker(tiny_model_dir), "tiny", PolicyServerSettings(max_batch=2))

    async def run() -> list:
        calls = [
            server._generate(list(_FailsOnMarker.marker), max_tokens=4, seed=1),
            server._generate([5, 6, 7], max_tokens=4, seed=1),  # shares the failing batch
            server._generate([8, 9, 10], max_tokens=4, seed=1),  # the next batch
        ]
        return await asyncio.gather(*calls, return_exceptions=True)

    failed, shared, later = asyncio.run(run())
    assert isinstance(failed, RuntimeError) and isinstance(shared, RuntimeError)
    out, version = later
    assert 1 <= len(out.token_ids) <= 4 and version == "0"
    assert server.batches == 1  # only the batch that generated is counted


def test_a_cancelled_request_does_not_disturb_the_others(tiny_model_dir: Path) -> None:
    server = PolicyServer(HFEngine(tiny_model_dir), "tiny", PolicyServerSettings(max_batch=8))

    async def run() -> list:
        gone = asyncio.ensure_future(server._generate([5, 6, 7], max_tokens=8, seed=1))
        kept = asyncio.ensure_future(server._generate([8, 9, 10], max_tokens=8, seed=2))
        await asyncio.sleep(0)  # both queued, the batcher not yet run
        gone.cancel()
        return [await kept]

    ((out, _),) = asyncio.run(run())
    alone = server.engine.generate([8, 9, 10], 8, seed=2)
    assert out.token_ids == alone.token_ids
