"""Lifecycle: hardening as configured, labels, destroy, gc after SIGKILL, warm pool, concurrency."""

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid

import docker
import pytest

from sandbox import ownership
from sandbox.base import SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.docker_sandbox import DockerSandbox
from sandbox.hardening import runsc_pids
from sandbox.pool import WarmPool
from sandbox.settings import SandboxSettings
from tests.sandbox.conftest import small_limits

pytestmark = pytest.mark.docker

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


async def test_container_is_hardened_and_labelled(
    backend: DockerBackend, sandbox: DockerSandbox, instance: str
) -> None:
    info = await backend.call(backend.client.api.inspect_container, sandbox.id)
    host = info["HostConfig"]
    limits = sandbox.limits
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert host["Privileged"] is False and host["Init"] is True
    assert host["Runtime"] == backend.settings.runtime
    # gVisor's host threads count in the pids cgroup: a larger host cap, the agent held by nproc inside
    pids = runsc_pids(limits) if backend.settings.runtime == "runsc" else limits.pids
    assert host["PidsLimit"] == pids
    assert host["Memory"] == host["MemorySwap"] == limits.memory_bytes
    assert host["NanoCpus"] == int(limits.cpus * 1e9)
    assert set(host["Tmpfs"]) == {"/workspace", "/tmp"}
    assert "size=67108864" in host["Tmpfs"]["/workspace"]
    ulimits = {u["Name"]: u["Hard"] for u in host["Ulimits"]}
    assert ulimits["nofile"] == limits.nofile and ulimits["fsize"] == limits.fsize_bytes
    if backend.settings.runtime == "runsc":
        assert ulimits["nproc"] == limits.pids
    assert not info["Mounts"], "no bind mounts or volumes at all"
    labels = info["Config"]["Labels"]
    assert labels[ownership.INSTANCE] == instance and labels[ownership.EPISODE] == "ep-test"
    assert labels[ownership.OWNER_PID] == str(os.getpid())


async def test_destroy_removes_the_container_and_is_idempotent(
    backend: DockerBackend, spec: SandboxSpec
) -> None:
    sandbox = await backend.create(spec)
    await sandbox.destroy()
    await sandbox.destroy()
    with pytest.raises(docker.errors.NotFound):
        await backend.call(backend.client.api.inspect_container, sandbox.id)


CHILD = """
import asyncio, sys
from sandbox.base import SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.settings import SandboxSettings
from tests.sandbox.conftest import small_limits

async def main():
    backend = DockerBackend(sys.argv[1], None, SandboxSettings(image=sys.argv[2], limits=small_limits()))
    for _ in range(2):
        await backend.create(SandboxSpec(image=sys.argv[2], limits=small_limits()))
    print("ready", flush=True)
    await asyncio.sleep(300)

asyncio.run(main())
"""


async def test_gc_removes_sandboxes_of_a_sigkilled_owner(sandbox_image: str, docker_client) -> None:
    instance = f"test-gc-{uuid.uuid4().hex[:8]}"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, instance, sandbox_image], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 60)
        assert line.strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    label = {"label": f"{ownership.INSTANCE}={instance}"}
    assert len(docker_client.containers.list(all=True, filters=label)) == 2

    # A live owner's sandboxes survive gc; the dead owner's are removed by the next start.
    survivor_backend = DockerBackend(
        instance, None, SandboxSettings(image=sandbox_image, limits=small_limits())
    )
    try:
        survivor = await survivor_backend.create(SandboxSpec(image=sandbox_image, limits=small_limits()))
        remaining = docker_client.containers.list(all=True, filters=label)
        assert [c.id for c in remaining] == [survivor.id]
        assert await survivor_backend.gc() == 0
    finally:
        await survivor_backend.close()
    assert docker_client.containers.list(all=True, filters=label) == []


async def test_warm_pool_hands_out_fresh_sandboxes_and_refills(
    backend: DockerBackend, sandbox_image: str
) -> None:
    pool = WarmPool(backend, size=2)
    template = SandboxSpec(image=sandbox_image, limits=small_limits())
    await pool.start(template)
    try:
        assert pool.ready_count(template) == 2
        workspace = _tar({"task.txt": b"do the thing"})
        first = await pool.acquire(
            SandboxSpec(image=sandbox_image, limits=small_limits(), workspace=workspace)
        )
        second = await pool.acquire(SandboxSpec(image=sandbox_image, limits=small_limits(), episode_id="e2"))
        assert first.id != second.id
        assert (await first.exec("cat task.txt")).output == "do the thing"
        assert (await second.exec("find /workspace -mindepth 1")).output == ""
        assert second.spec.episode_id == "e2"
        await first.exec("echo dirty > /tmp/leftover")
        await first.destroy()
        for _ in range(300):  # refills take a container start; slow on a loaded machine
            if pool.ready_count(template) == 2:
                break
            await asyncio.sleep(0.1)
        assert pool.ready_count(template) == 2
        third = await pool.acquire(template)
        assert third.id not in (first.id, second.id)
        assert (await third.exec("find /tmp -mindepth 1")).output == ""
        await second.destroy()
        await third.destroy()
    finally:
        await pool.close()
    assert not [sid for sid in backend.owned_ids() if sid in {first.id, second.id, third.id}]


async def test_thirty_two_concurrent_sandboxes(sandbox_image: str, instance: str) -> None:
    settings = SandboxSettings(
        image=sandbox_image, limits=small_limits(memory="96m", workspace_size="8m", tmp_size="8m")
    )
    many = DockerBackend(instance, None, settings)
    try:
        spec = SandboxSpec(image=sandbox_image, limits=settings.limits)
        sandboxes = await asyncio.gather(*(many.create(spec) for _ in range(32)))
        assert len({s.id for s in sandboxes}) == 32
        results = await asyncio.gather(*(s.exec(f"echo {i} > n; cat n") for i, s in enumerate(sandboxes)))
        assert [r.output for r in results] == [f"{i}\n" for i in range(32)]
    finally:
        await many.close()
    label = {"label": f"{ownership.OWNER_TOKEN}={many._token}"}
    assert many.client is not None and docker.from_env().containers.list(all=True, filters=label) == []


def _tar(files: dict[str, bytes]) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def test_pool_keeps_few_keys_warm_and_survives_dead_warm_sandboxes(
    backend: DockerBackend, sandbox_image: str
) -> None:
    pool = WarmPool(backend, size=1, max_keys=1)
    first = SandboxSpec(image=sandbox_image, limits=small_limits())
    other = SandboxSpec(image=sandbox_image, limits=small_limits(pids=64), workspace=_tar({"f": b"x"}))
    await pool.start(first)
    try:
        (waiting,) = list(pool._ready[(first.image, first.limits.model_dump_json())])
        await backend.call(backend.client.api.remove_container, waiting.id, force=True)  # dies while waiting
        sandbox = await pool.acquire(
            SandboxSpec(image=sandbox_image, limits=small_limits(), workspace=_tar({"a": b"1"}))
        )
        assert sandbox.id != waiting.id and (await sandbox.exec("cat a")).output == "1"
        await sandbox.destroy()
        for _ in range(300):  # refills take a container start; slow on a loaded machine
            if pool.ready_count(first) == 1:
                break
            await asyncio.sleep(0.1)
        evicted = list(pool._ready[(first.image, first.limits.model_dump_json())])
        used = await pool.acquire(other)  # a second key: the first key's warm sandbox is destroyed
        assert pool.ready_count(first) == 0
        for old in evicted:
            with pytest.raises(docker.errors.NotFound):
                await backend.call(backend.client.api.inspect_container, old.id)
        assert (await used.exec("cat f")).output == "x"
        await used.destroy()
    finally:
        await pool.close()


async def test_gc_removes_a_container_whose_creation_was_abandoned(
    backend: DockerBackend, sandbox_image: str
) -> None:
    # The engine made the container but the creating call was cancelled before a sandbox held it.
    labels = {**ownership.owner_labels(backend.instance, backend._token), ownership.EPISODE: ""}
    created = await backend.call(backend.client.api.create_container, sandbox_image, ["true"], labels=labels)
    fresh = {"Id": created["Id"], "Labels": labels, "Created": int(time.time())}
    assert not backend._is_orphan(fresh)  # could still be registering
    assert backend._is_orphan({**fresh, "Created": int(time.time()) - 600})
    await backend.remove(created["Id"])


async def test_close_removes_a_container_whose_creation_was_abandoned(
    sandbox_image: str, instance: str, docker_client
) -> None:
    # A gateway shut down while a warm-pool start was being cancelled: nothing of ours may outlive close.
    backend = DockerBackend(instance, None, SandboxSettings(image=sandbox_image, limits=small_limits()))
    await backend._ensure_started()
    labels = {**ownership.owner_labels(backend.instance, backend._token), ownership.EPISODE: ""}
    created = await backend.call(backend.client.api.create_container, sandbox_image, ["true"], labels=labels)
    await backend.close()
    assert docker_client.containers.list(all=True, filters={"id": created["Id"]}) == []
