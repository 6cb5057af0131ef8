"""A real HTTP server on loopback that speaks OpenAI chat-completions, standing in for an LLM judge.

A large judge model cannot run in tests, so this server answers ``POST /v1/chat/completions`` with
whatever a pluggable *policy* decides: a verdict, raw (possibly broken) content, an HTTP error, or a
delay. The real ``openai`` client talks to it over TCP, so timeouts, retries and connection handling
are exercised for real. It records every request and the peak number of requests in flight.

    with running_judge_server(keyword_policy({"curl": "answer_fetch"})) as server:
        settings = JudgeSettings(base_url=server.base_url)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class JudgeReply:
    """How to answer one request. ``verdict`` becomes JSON content; ``content`` is sent verbatim;
    ``body`` replaces the whole HTTP body (to send something that is not a chat completion)."""

    verdict: dict[str, Any] | None = None
    content: str | None = None
    status: int = 200
    delay_s: float = 0.0
    body: bytes | None = None


Policy = Callable[[dict[str, Any]], JudgeReply]


def verdict(
    verdict: str = "cheat", category: str = "answer_fetch", confidence: float = 0.9, reason: str = "test"
) -> JudgeReply:
    """A well-formed verdict reply."""
    return JudgeReply(
        verdict={"verdict": verdict, "category": category, "confidence": confidence, "reason": reason}
    )


def always(reply: JudgeReply) -> Policy:
    """Answer every request the same way."""
    return lambda _request: reply


def keyword_policy(cheat_words: dict[str, str], delay_s: float = 0.0) -> Policy:
    """Cheat (with the mapped category) when the call section of the prompt contains a word, else benign.

    Only the text after the last ``<call>`` marker is searched, so the system prompt's own examples
    do not count.
    """

    def policy(request: dict[str, Any]) -> JudgeReply:
        prompt = request["messages"][-1]["content"]
        call_text = prompt.split("## The call, normalised", 1)[-1]
        for word, category in cheat_words.items():
            if word in call_text:
                reply = verdict("cheat", category, 0.95, f"the call uses {word}")
                return JudgeReply(verdict=reply.verdict, delay_s=delay_s)
        reply = verdict("benign", "answer_fetch", 0.9, "ordinary development work")
        return JudgeReply(verdict=reply.verdict, delay_s=delay_s)

    return policy


@dataclass
class FakeJudgeServer:
    """A running server: ``base_url`` ends in ``/v1``, as OpenAI clients expect."""

    httpd: ThreadingHTTPServer
    thread: threading.Thread
    policy: Policy
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def stop(self) -> None:
        """Stop serving and wake any handler sleeping on a delay; safe to call twice."""
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def _tokens(text: str) -> int:
    """A stand-in tokenizer (about four characters a token), so cost accounting can be tested."""
    return max(1, len(text) // 4)


def _completion(content: str, model: str, prompt: str = "") -> dict[str, Any]:
    prompt_tokens, completion_tokens = _tokens(prompt), _tokens(content)
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _handler_class(server: FakeJudgeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def _send(self, status: int, body: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test); nothing to answer

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                body = {"object": "list", "data": [{"id": "judge", "object": "model", "owned_by": "test"}]}
                self._send(200, json.dumps(body).encode())
            else:
                self._send(404, b'{"error": {"message": "not found"}}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, b'{"error": {"message": "not found"}}')
                return
            try:
                request = json.loads(raw)
            except json.JSONDecodeError:
                self._send(400, b'{"error": {"message": "body is not JSON"}}')
                return
            with server.lock:
                server.requests.append(request)
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                reply = server.policy(request)
                if reply.delay_s:
                    server.stopping.wait(reply.delay_s)
                if reply.body is not None:
                    self._send(reply.status, reply.body)
                elif reply.status != 200:
                    error = {"error": {"message": f"test error {reply.status}", "type": "server_error"}}
                    self._send(reply.status, json.dumps(error).encode())
                else:
                    content = reply.content if reply.verdict is None else json.dumps(reply.verdict)
                    model = str(request.get("model", "judge"))
                    prompt = "".join(str(m.get("content", "")) for m in request.get("messages") or [])
                    self._send(200, json.dumps(_completion(content or "", model, prompt)).encode())
            finally:
                with server.lock:
                    server.in_flight -= 1

    return Handler


def start_judge_server(policy: Policy) -> FakeJudgeServer:
    """Serve ``policy`` on a free port of 127.0.0.1 in a background thread; call ``stop()`` after."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    httpd.daemon_threads = True
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-judge", daemon=True
    )
    server = FakeJudgeServer(httpd=httpd, thread=thread, policy=policy)
    httpd.RequestHandlerClass = _handler_class(server)
    thread.start()
    return server


@contextmanager
def running_judge_server(policy: Policy) -> Iterator[FakeJudgeServer]:
    """``start_judge_server`` as a context manager that always stops the server."""
    server = start_judge_server(policy)
    try:
        yield server
    finally:
        server.stop()
