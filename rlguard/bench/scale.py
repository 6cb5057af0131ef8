"""``rlguard bench scale``: many engines, many gateways, and nothing lost when one dies.

Measured with real parts on this machine (``rlguard.bench.fleet_parts``): ``rlguard serve``
children on one PostgreSQL database, the main Docker engine and a second dockerd beside it.

- ``engines_{1,2}_episodes_per_s``: whole episodes (create, calls, finish = grading in a fresh
  container) through one gateway using one engine, then both. On one machine the two engines share
  its cores, so the ratio is not a speed-up: near 1.0 it shows the fleet's placement adds no serial
  bottleneck.
- ``gateways_{1,2}_calls_per_s``: tool calls/s of the same episodes through one gateway, then split
  over two gateways on the same database.
- ``load_*``: ``load_episodes`` episodes alive at once across both engines (all created before any
  call), each with calls and a finish.
- fault runs: the second engine SIGKILLed under running episodes; a gateway SIGKILLed under its
  episodes while another shares the database. ``lost_episodes`` counts episodes left ``running``
  (or never recorded) once recovery had its time; ``leaked_containers`` counts containers of the
  bench's instances left on either engine after every gateway stopped. Both must be 0.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from rlguard.bench.fleet_parts import (
    MAIN_ENGINE,
    BenchDatabase,
    Driven,
    ServeProcess,
    count_containers,
    drive_episode,
    engines_json,
    kill_second_engine,
    postgres_server,
    remove_containers,
    second_engine,
)
from rlguard.errors import RlguardError

LIMITS = {
    "RLGUARD_SANDBOX__LIMITS__MEMORY": "256m",
    "RLGUARD_SANDBOX__LIMITS__WORKSPACE_SIZE": "64m",
    "RLGUARD_SANDBOX__LIMITS__TMP_SIZE": "32m",
}
FAST_LEASES = {"RLGUARD_GATEWAY__LEASE_TTL_S": "3", "RLGUARD_GATEWAY__LEASE_TAKEOVER_S": "3"}
RECOVERY_WAIT_S = 180
STATS_SETTLE_S = 11  # PostgreSQL 15: an idle backend reports its statistics within 10 s


class ScaleBench:
    """One run: its state directory, database, admin token and the instances it made."""

    def __init__(self, state: Path, db: BenchDatabase, engine2: str) -> None:
        self.state = state
        self.db = db
        self.engine2 = engine2
        self.token = secrets.token_urlsafe(32)
        self.instances: list[str] = []
        self.lost = 0
        self.leaked = 0
        self.db_load: dict[str, Any] = {}

    def gateway(self, engines: str, **env: str) -> ServeProcess:
        name = f"bench-scale-{secrets.token_hex(3)}"
        self.instances.append(name)
        full = {
            "RLGUARD_DATABASE_URL": self.db.url,
            "RLGUARD_INSTANCE": name,
            "RLGUARD_SANDBOX__ENGINES": engines,
            **LIMITS,
            **env,
        }
        return ServeProcess(self.state / name, self.token, full)

    def one_engine(self, **extra: Any) -> str:
        return engines_json({"url": MAIN_ENGINE, "name": "main", "max_sandboxes": 96, **extra})

    def two_engines(self, **extra: Any) -> str:
        return engines_json(
            {"url": MAIN_ENGINE, "name": "main", "max_sandboxes": 48, **extra},
            {"url": self.engine2, "name": "two", "max_sandboxes": 48, "health_interval_s": 1.0, **extra},
        )

    async def run_all(
        self, episodes: int, concurrency: int, calls: int, load_episodes: int
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"load_average_start": round(os.getloadavg()[0], 2)}
        for count, engines in (
            (1, self.one_engine(warm_pool_size=4)),
            (2, self.two_engines(warm_pool_size=2)),
        ):
            out[f"engines_{count}_episodes_per_s"] = await self._episodes_per_s(
                engines, episodes, concurrency
            )
        out["engines_2_vs_1"] = round(out["engines_2_episodes_per_s"] / out["engines_1_episodes_per_s"], 3)
        for count in (1, 2):
            out[f"gateways_{count}_calls_per_s"] = await self._calls_per_s(count, 16, calls)
        out["gateways_2_vs_1"] = round(out["gateways_2_calls_per_s"] / out["gateways_1_calls_per_s"], 3)
        out.update(self.db_load)
        out.update(await self._load(load_episodes))
        out.update(await self._engine_fault())
        out.update(await self._gateway_fault())
        out["lost_episodes"] = self.lost
        out["leaked_containers"] = self.leaked
        out["load_average_end"] = round(os.getloadavg()[0], 2)
        out["cpus"] = os.cpu_count()
        return out

    # -- throughput ---------------------------------------------------------------------------------

    async def _episodes_per_s(self, engines: str, episodes: int, concurrency: int) -> float:
        gateway = self.gateway(engines, RLGUARD_SANDBOX__WARM_POOL_SIZE="2")
        try:
            async with _client(concurrency) as client:
                await _run_many(client, gateway.url, self.token, 2, 2, calls=2)  # warm-up
                started = time.perf_counter()
                results = await _run_many(client, gateway.url, self.token, episodes, concurrency, calls=2)
                elapsed = time.perf_counter() - started
            _require_all(results, "finished", "episodes/s run")
        finally:
            gateway.stop()
        await self._account([gateway.instance], [r.episode_id for r in results])
        return round(episodes / elapsed, 3)

    async def _calls_per_s(self, gateways: int, episodes: int, calls: int) -> float:
        procs = [
            self.gateway(self.one_engine(), RLGUARD_SANDBOX__WARM_POOL_SIZE="0") for _ in range(gateways)
        ]
        try:
            async with _client(episodes) as client:
                opened = []
                for i in range(episodes):
                    url = procs[i % gateways].url
                    created = await client.post(
                        f"{url}/v1/episodes",
                        json={"task": "builtin/matrix-transpose"},
                        headers=_auth(self.token),
                    )
                    if created.status_code != 200:
                        raise RlguardError(f"bench scale: could not create an episode: {created.text[:200]}")
                    opened.append((url, created.json()))

                async def calls_of(url: str, body: dict[str, Any], n: int) -> None:
                    for _ in range(n):
                        response = await client.post(
                            f"{url}/v1/episodes/{body['episode_id']}/calls",
                            json={"tool": "bash", "arguments": {"command": "echo hi"}},
                            headers=_auth(body["agent_token"]),
                        )
                        if response.status_code != 200:
                            raise RlguardError(f"bench scale: a call failed: {response.status_code}")

                await asyncio.gather(*(calls_of(url, body, 2) for url, body in opened))  # warm-up
                await asyncio.sleep(STATS_SETTLE_S)  # idle backends report their statistics
                commits, rows = self.db.activity()
                started = time.perf_counter()
                await asyncio.gather(*(calls_of(url, body, calls) for url, body in opened))
                elapsed = time.perf_counter() - started
                await asyncio.sleep(STATS_SETTLE_S)
                commits_after, rows_after = self.db.activity()
                total = episodes * calls
                self.db_load = {
                    "pg_commits_per_call": round((commits_after - commits) / total, 3),
                    "pg_rows_written_per_call": round((rows_after - rows) / total, 3),
                    "pg_call_log_bytes_per_call": round(self.db.tool_call_bytes()),
                }
        finally:
            for proc in procs:
                proc.stop()  # running episodes become interrupted and their sandboxes go
        await self._account([p.instance for p in procs], [body["episode_id"] for _, body in opened])
        return round(episodes * calls / elapsed, 1)

    async def _load(self, episodes: int) -> dict[str, Any]:
        """``episodes`` alive at once across both engines, then calls and a finish each."""
        gateway = self.gateway(self.two_engines(warm_pool_size=0), RLGUARD_SANDBOX__WARM_POOL_SIZE="0")
        peak: dict[str, int] = {}
        try:
            async with _client(episodes) as client:
                created = [asyncio.Event() for _ in range(episodes)]
                go = asyncio.Event()
                started = time.perf_counter()
                tasks = [
                    asyncio.create_task(
                        drive_episode(client, gateway.url, self.token, 3, created=event, start_calls=go)
                    )
                    for event in created
                ]
                await asyncio.gather(*(event.wait() for event in created))  # all alive at once
                engines = (await client.get(f"{gateway.url}/healthz")).json()["engines"]
                peak = {e["name"]: e["in_use"] for e in engines}
                go.set()
                results = await asyncio.gather(*tasks)
                elapsed = time.perf_counter() - started
        finally:
            gateway.stop()
        await self._account([gateway.instance], [r.episode_id for r in results])
        ok = sum(r.outcome == "finished" for r in results)
        return {
            "load_episodes": episodes,
            "load_alive_at_once": sum(peak.values()),
            "load_per_engine": ",".join(f"{k}={v}" for k, v in sorted(peak.items())),
            "load_episodes_finished": ok,
            "load_outcomes": ",".join(f"{k}={v}" for k, v in sorted(_tally(results).items())),
            "load_wall_s": round(elapsed, 1),
            "load_average_after_load": round(os.getloadavg()[0], 2),
        }

    # -- faults -------------------------------------------------------------------------------------

    async def _engine_fault(self) -> dict[str, Any]:
        """SIGKILL the second engine under 16 running episodes; every episode must end."""
        engines = engines_json(
            {"url": MAIN_ENGINE, "name": "main", "max_sandboxes": 8, "warm_pool_size": 0},
            {
                "url": self.engine2,
                "name": "two",
                "max_sandboxes": 48,
                "health_interval_s": 0.5,
                "warm_pool_size": 1,
            },
        )
        gateway = self.gateway(engines)
        try:
            async with _client(16) as client:
                runs = [
                    asyncio.create_task(
                        drive_episode(client, gateway.url, self.token, 8, "sleep 0.4; echo x")
                    )
                    for _ in range(16)
                ]
                await asyncio.sleep(4)
                kill_second_engine()
                results = await asyncio.gather(*runs)
            ids = [r.episode_id for r in results]
            await self._wait_ended(ids)
            second_engine()  # back: the gateway removes what was lost there
            await asyncio.sleep(5)
        finally:
            gateway.stop()
        outcomes = _tally(results)
        await self._account([gateway.instance], ids)
        return {
            "fault_engine_episodes": len(results),
            "fault_engine_infra_errors": outcomes.get("infra_error", 0),
            "fault_engine_finished": outcomes.get("finished", 0),
        }

    async def _gateway_fault(self) -> dict[str, Any]:
        """SIGKILL one of two gateways on one database under its episodes; the other ends them."""
        engines = self.one_engine(warm_pool_size=1)
        doomed = self.gateway(engines, **FAST_LEASES)
        survivor = self.gateway(engines, **FAST_LEASES)
        try:
            async with _client(16) as client:
                runs = [
                    asyncio.create_task(drive_episode(client, gw.url, self.token, 16, "sleep 0.4; echo x"))
                    for gw in (doomed, survivor)
                    for _ in range(8)
                ]
                await asyncio.sleep(4)
                doomed.kill()
                results = await asyncio.gather(*runs)
            ids = [r.episode_id for r in results]
            await self._wait_ended(ids)
            statuses = self.db.statuses([i for i in ids if i])
            await asyncio.sleep(3)  # the survivor's gc of the dead instance follows its takeover
        finally:
            survivor.stop()
            doomed.kill()
        await self._account([doomed.instance, survivor.instance], ids)
        orphaned = [r.episode_id for r in results[:8] if r.episode_id and r.outcome == "lost gateway"]
        recovered = [i for i in orphaned if statuses.get(i) in ("interrupted", "infra_error")]
        return {
            "fault_gateway_episodes": len(results),
            "fault_gateway_orphaned": len(orphaned),
            "fault_gateway_recovered": len(recovered),
            "fault_gateway_survivor_finished": sum(r.outcome == "finished" for r in results[8:]),
        }

    # -- accounting ---------------------------------------------------------------------------------

    async def _wait_ended(self, ids: list[str | None]) -> None:
        deadline = time.monotonic() + RECOVERY_WAIT_S
        known = [i for i in ids if i]
        while time.monotonic() < deadline:
            if all(status != "running" for status in self.db.statuses(known).values()):
                return
            await asyncio.sleep(1)

    async def _account(self, instances: list[str], ids: list[str | None]) -> None:
        """Count what a scenario lost (episodes still running or never recorded) and leaked
        (containers of its instances on either engine), then remove the leak for the next one."""
        known = [i for i in ids if i]
        statuses = self.db.statuses(known)
        self.lost += sum(1 for i in known if statuses.get(i, "missing") in ("running", "missing"))
        for engine in (MAIN_ENGINE, self.engine2):
            leaked = count_containers(engine, instances)
            self.leaked += leaked
            if leaked:
                remove_containers(engine, instances)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _client(connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections + 4, max_keepalive_connections=connections + 4)
    return httpx.AsyncClient(timeout=600, limits=limits)


async def _run_many(
    client: httpx.AsyncClient, url: str, token: str, episodes: int, concurrency: int, calls: int
) -> list[Driven]:
    slots = asyncio.Semaphore(concurrency)

    async def one() -> Driven:
        async with slots:
            return await drive_episode(client, url, token, calls)

    return list(await asyncio.gather(*(one() for _ in range(episodes))))


def _tally(results: list[Driven]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for result in results:
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
    return counts


def _require_all(results: list[Driven], outcome: str, what: str) -> None:
    bad = [r.outcome for r in results if r.outcome != outcome]
    if bad:
        raise RlguardError(f"bench scale: {len(bad)} episodes of the {what} did not end {outcome}: {bad[:3]}")


def run_bench(
    episodes: int = 24,
    concurrency: int = 8,
    calls: int = 30,
    load_episodes: int = 64,
) -> dict[str, Any]:
    """Start the parts, run every scenario, stop everything; the numbers (see the module docstring)."""
    engine2 = second_engine()
    db = BenchDatabase(postgres_server())
    try:
        with tempfile.TemporaryDirectory(prefix="rlguard-bench-scale-") as tmp:
            bench = ScaleBench(Path(tmp), db, engine2)
            return asyncio.run(bench.run_all(episodes, concurrency, calls, load_episodes))
    finally:
        db.close()
