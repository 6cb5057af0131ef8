"""Sandboxes on two real Docker engines: placement, limits, TLS, image presence, a killed engine.

The second engine is a real dockerd beside the main one (``scripts/ensure_second_engine.sh``);
the fault test SIGKILLs it and starts it again. Each test has its own instance label, so gc and
the clean-up touch only its own containers.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator

import docker
import pytest

from sandbox.base import EngineUnavailable, SandboxError, SandboxGone, SandboxSpec
from sandbox.fleet import FleetBackend
from sandbox.settings import SandboxSettings
from tests.sandbox.conftest import small_limits
from tests.support.engines import SecondEngine, ensure_second_engine, remove_instance

MAIN = "unix:///var/run/docker.sock"


def _fleet(instance: str, image: str, engines: list[dict], warm: int = 0) -> FleetBackend:
    settings = SandboxSettings(image=image, limits=small_limits(), warm_pool_size=warm, engines=engines)
    return FleetBackend(instance, settings, list(settings.engines))


@pytest.fixture
async def instance(second_engine: SecondEngine) -> AsyncIterator[str]:
    name = f"test-fleet-{uuid.uuid4().hex[:8]}"
    yield name
    for url in (MAIN, second_engine.url):
        remove_instance(url, name)


def _spec(image: str) -> SandboxSpec:
    return SandboxSpec(image=image, limits=small_limits(), episode_id="ep-fleet")


async def test_placement_fills_both_engines_to_their_limits(instance, sandbox_image, second_engine) -> None:
    fleet = _fleet(
        instance,
        sandbox_image,
        [
            {"url": MAIN, "name": "main", "max_sandboxes": 3},
            {"url": second_engine.url, "name": "two", "max_sandboxes": 3},
        ],
    )
    await fleet.start()
    try:
        sandboxes = await asyncio.gather(*(fleet.acquire(_spec(sandbox_image)) for _ in range(6)))
        assert sorted(sb.engine for sb in sandboxes) == ["main"] * 3 + ["two"] * 3
        on_two = {sb.id for sb in sandboxes if sb.engine == "two"}
        assert set(second_engine.containers(instance)) == on_two  # really on the second engine
        results = await asyncio.gather(*(sb.exec("echo $((6*7))") for sb in sandboxes))
        assert [r.output for r in results] == ["42\n"] * 6
        with pytest.raises(SandboxError, match=r"main: full.*two: full|two: full.*main: full"):
            await fleet.acquire(_spec(sandbox_image))
        assert {s["name"]: s["in_use"] for s in fleet.status()} == {"main": 3, "two": 3}
        await sandboxes[0].destroy()
        replacement = await fleet.acquire(_spec(sandbox_image))  # room again on that engine
        assert replacement.engine == sandboxes[0].engine
    finally:
        await fleet.close()
    assert second_engine.containers(instance) == []


async def test_a_tls_engine_runs_sandboxes_over_its_tls_listener(
    instance, sandbox_image, second_engine
) -> None:
    fleet = _fleet(
        instance, sandbox_image, [{"url": second_engine.tls_url, "name": "tls", "tls": second_engine.tls()}]
    )
    await fleet.start()
    try:
        sandbox = await fleet.acquire(_spec(sandbox_image))
        assert sandbox.engine == "tls" and sandbox.uses_runner  # the fast path attaches over TLS
        await sandbox.write_file("note.txt", b"over tls\n")
        assert (await sandbox.exec("cat note.txt")).output == "over tls\n"
        assert sandbox.id in second_engine.containers(instance)
        await sandbox.destroy()
        assert second_engine.containers(instance) == []
    finally:
        await fleet.close()


async def test_a_tls_engine_refuses_a_client_without_a_certificate(
    instance, sandbox_image, second_engine
) -> None:
    tls = {"ca_cert": second_engine.tls()["ca_cert"]}  # the CA, but no client certificate
    fleet = _fleet(instance, sandbox_image, [{"url": second_engine.tls_url, "name": "tls", "tls": tls}])
    with pytest.raises(SandboxError, match="no Docker engine answers at tcp:"):
        await fleet.start()
    await fleet.close()


async def test_placement_prefers_the_engine_that_holds_the_image(
    instance, sandbox_image, second_engine
) -> None:
    main = docker.DockerClient(base_url=MAIN)
    only_main = f"rlguard-test/only-main:{uuid.uuid4().hex[:8]}"  # a tag of the sandbox image, main only
    main.images.get(sandbox_image).tag(only_main)
    fleet = _fleet(
        instance,
        sandbox_image,
        # the second engine has far more room, but not the image
        [
            {"url": MAIN, "name": "main", "max_sandboxes": 2},
            {"url": second_engine.url, "name": "two", "max_sandboxes": 50},
        ],
    )
    await fleet.start()
    try:
        first = await fleet.acquire(_spec(only_main))
        second = await fleet.acquire(_spec(sandbox_image))
        assert (first.engine, second.engine) == ("main", "two")
        await fleet.acquire(_spec(only_main))  # main is now full (2/2)
        with pytest.raises(SandboxError, match=r"two: .*not present"):  # tried, and said why
            await fleet.acquire(_spec(only_main))
    finally:
        await fleet.close()
        main.images.remove(only_main)
        main.close()


async def test_attach_takes_over_a_sandbox_another_backend_started(
    instance, sandbox_image, second_engine
) -> None:
    engines = [{"url": second_engine.url, "name": "two"}]
    owner, heir = _fleet(instance, sandbox_image, engines), _fleet(instance, sandbox_image, engines)
    await owner.start()
    await heir.start()
    try:
        sandbox = await owner.acquire(_spec(sandbox_image))
        await sandbox.write_file("work.txt", b"done by the first owner\n")
        taken = await heir.attach(sandbox.id, _spec(sandbox_image), engine="two")
        assert (await taken.exec("cat work.txt; id -u")).output == f"done by the first owner\n{sandbox.uid}\n"
        await taken.destroy()
        with pytest.raises(SandboxGone):
            await heir.attach(sandbox.id, _spec(sandbox_image), engine="two")
        with pytest.raises(SandboxGone, match="no engine named"):
            await heir.attach(sandbox.id, _spec(sandbox_image), engine="elsewhere")
    finally:
        await owner.close()
        await heir.close()


async def test_a_killed_engine_is_marked_down_its_sandboxes_lost_and_cleaned_when_back(
    instance, sandbox_image, second_engine
) -> None:
    """SIGKILL the second dockerd mid-use: its sandboxes raise EngineUnavailable (not an answer the
    agent would mistake for its own doing), listeners hear it, placement goes to the main engine,
    and once the engine is back its lost containers are removed and it takes sandboxes again."""
    fleet = _fleet(
        instance,
        sandbox_image,
        [
            {"url": MAIN, "name": "main", "max_sandboxes": 2, "health_interval_s": 0.5, "warm_pool_size": 0},
            {"url": second_engine.url, "name": "two", "max_sandboxes": 4, "health_interval_s": 0.5},
        ],
        warm=1,
    )
    downs: list[tuple[str, str]] = []

    async def heard(engine: str, reason: str) -> None:
        downs.append((engine, reason))

    fleet.listeners.append(heard)
    await fleet.start()
    try:
        on_main = await fleet.acquire(_spec(sandbox_image))
        doomed = [await fleet.acquire(_spec(sandbox_image)) for _ in range(2)]
        assert on_main.engine == "main" and [sb.engine for sb in doomed] == ["two", "two"]
        deadline = time.monotonic() + 60
        while len(second_engine.containers(instance)) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert len(second_engine.containers(instance)) == 3  # two episodes' and a warm one refilled
        second_engine.kill()
        with pytest.raises(EngineUnavailable, match="two"):
            await doomed[0].exec("echo still there?")
        deadline = time.monotonic() + 30
        while not downs and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert [engine for engine, _ in downs] == ["two"]
        with pytest.raises(EngineUnavailable):
            await doomed[1].read_file("anything")
        await doomed[1].destroy()  # no error: it is removed when the engine is back
        assert (await on_main.exec("echo fine")).output == "fine\n"  # the other engine is untouched
        elsewhere = await fleet.acquire(_spec(sandbox_image))
        assert elsewhere.engine == "main"
        with pytest.raises(SandboxError, match="two: down"):
            await fleet.acquire(_spec(sandbox_image))  # main is full, two is down
        ensure_second_engine()
        deadline = time.monotonic() + 60
        while not fleet.member("two").up and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert fleet.member("two").up
        # what was lost there is gone; the pool refilled with one fresh warm sandbox
        lost = {sb.id for sb in doomed}
        deadline = time.monotonic() + 60
        while lost & set(second_engine.containers(instance)) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert not lost & set(second_engine.containers(instance))
        back = await fleet.acquire(_spec(sandbox_image))
        assert back.engine == "two" and (await back.exec("echo back")).output == "back\n"
    finally:
        if not second_engine.answers():
            ensure_second_engine()
        await fleet.close()
    assert second_engine.containers(instance) == []


async def test_concurrent_placements_spread_over_the_engines(instance, sandbox_image, second_engine) -> None:
    """A burst of placements is shared by room, not piled onto the engine ranked first at the start."""
    fleet = _fleet(
        instance,
        sandbox_image,
        [
            {"url": MAIN, "name": "main", "max_sandboxes": 40},
            {"url": second_engine.url, "name": "two", "max_sandboxes": 40},
        ],
    )
    await fleet.start()
    try:
        sandboxes = await asyncio.gather(*(fleet.acquire(_spec(sandbox_image)) for _ in range(8)))
        assert sorted(sb.engine for sb in sandboxes) == ["main"] * 4 + ["two"] * 4
    finally:
        await fleet.close()


async def test_an_ssh_engine_runs_sandboxes_through_docker_dial_stdio(
    instance, sandbox_image, monkeypatch
) -> None:
    """``ssh://``: the SDK and the runner's attach stream both go through ``ssh HOST docker system
    dial-stdio`` to a real sshd (the tests' own, on loopback; it reaches the main engine)."""
    import subprocess

    from tests.support.engines import REPO

    started = subprocess.run(
        ["bash", str(REPO / "scripts" / "ensure_test_sshd.sh")], capture_output=True, text=True, timeout=300
    )
    assert started.returncode == 0, started.stderr
    ssh_bin, url = started.stdout.split()
    monkeypatch.setenv("PATH", f"{ssh_bin}:{os.environ['PATH']}")  # its `ssh` knows the test sshd's key
    fleet = _fleet(instance, sandbox_image, [{"url": url, "name": "over-ssh"}])
    await fleet.start()
    try:
        sandbox = await fleet.acquire(_spec(sandbox_image))
        assert sandbox.engine == "over-ssh" and sandbox.uses_runner
        await sandbox.write_file("via.txt", b"ssh\n")
        assert (await sandbox.exec("cat via.txt")).output == "ssh\n"
        await sandbox.destroy()
    finally:
        await fleet.close()
    main = docker.DockerClient(base_url=MAIN)
    try:
        assert main.containers.list(all=True, filters={"label": f"rlguard.instance={instance}"}) == []
    finally:
        main.close()
