"""``rlguard sandbox ...`` and ``rlguard bench sandbox`` (registered into ``rlguard.cli``).

Imports inside the commands keep ``rlguard --version`` and ``--help`` fast: docker, torch,
SQLAlchemy and the packages behind them load only for the command that runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from sandbox.base import SandboxError
from sandbox.settings import SandboxEnv

if TYPE_CHECKING:
    import docker

    from sandbox.settings import SandboxLimits


def engine_client() -> docker.DockerClient:
    """A docker SDK client for the configured engine, or one clear error when none answers."""
    import docker

    from sandbox.docker_backend import resolve_docker_host

    url = resolve_docker_host(SandboxEnv().docker_host)
    try:
        client = docker.DockerClient(base_url=url, version="auto")
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxError(
            f"no Docker engine answers at {url} ({exc}); run scripts/ensure_docker.sh"
        ) from exc
    return client


def limits_with(memory: str | None, timeout: float | None) -> SandboxLimits:
    """The configured limits with command-line overrides, validated into one clear error."""
    from pydantic import ValidationError

    from sandbox.settings import SandboxLimits, parse_size

    configured = SandboxEnv().sandbox.limits
    overrides: dict[str, object] = {}
    if memory is not None:
        overrides["memory"] = memory
        # tmpfs counts against memory: shrink the configured disk caps to fit a smaller --memory.
        with contextlib.suppress(ValueError):
            budget = parse_size(memory)
            for field, share in (("workspace_size", 2), ("tmp_size", 8)):
                if parse_size(getattr(configured, field)) > budget // share:
                    overrides[field] = f"{max(1, (budget // share) >> 20)}m"
    if timeout is not None:
        overrides["exec_timeout_s"] = timeout
    try:
        return SandboxLimits.model_validate({**configured.model_dump(), **overrides})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'limits'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise SandboxError(f"bad sandbox limits: {problems}") from None


async def _exec_once(argv: list[str], image: str, limits: SandboxLimits, workspace: Path | None) -> int:
    from sandbox.base import SandboxSpec
    from sandbox.docker_backend import DockerBackend

    backend = DockerBackend.from_settings(SandboxEnv())
    # SIGTERM/SIGHUP/SIGINT cancel the run, so the sandbox is removed before the process exits.
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        sandbox = await backend.create(SandboxSpec(image=image, limits=limits, workspace=workspace))
        result = await sandbox.exec(shlex.join(argv))
    except asyncio.CancelledError:
        raise SandboxError("interrupted; the sandbox was removed") from None
    finally:
        await backend.close()
    sys.stdout.write(result.output)
    if result.output and not result.output.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()
    return result.exit_code


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add ``rlguard sandbox`` and ``rlguard bench sandbox``."""
    sandbox_app = typer.Typer(help="Hardened Docker sandboxes.", no_args_is_help=True)
    image_app = typer.Typer(help="The sandbox image rlguard/sandbox-python:<version>.", no_args_is_help=True)
    sandbox_app.add_typer(image_app, name="image")
    app.add_typer(sandbox_app, name="sandbox")

    @sandbox_app.command("exec")
    def exec_command(
        command: list[str] = typer.Argument(
            ...,
            metavar="-- CMD...",
            help="Program and arguments, passed as they are (quoted for the sandbox's bash -c)",
        ),
        image: str = typer.Option("", "--image", help="Image (default: the configured sandbox image)"),
        timeout: float | None = typer.Option(None, "--timeout", help="Seconds before the command is killed"),
        memory: str | None = typer.Option(None, "--memory", help="Memory limit, e.g. 512m, 2g"),
        workspace: Path | None = typer.Option(None, "--workspace", help="Directory copied into /workspace"),
    ) -> None:
        """Run CMD in a fresh hardened sandbox, print its merged output, exit with its exit code."""
        from sandbox.image import default_image

        limits = limits_with(memory, timeout)
        if workspace is not None and not workspace.is_dir():
            raise SandboxError(f"--workspace {workspace} is not a directory")
        chosen = image or SandboxEnv().sandbox.image or default_image()
        raise typer.Exit(asyncio.run(_exec_once(command, chosen, limits, workspace)))

    @sandbox_app.command("gc")
    def gc_command() -> None:
        """Remove this instance's sandbox containers whose owning process is gone."""
        from sandbox.docker_backend import DockerBackend

        async def run() -> int:
            backend = DockerBackend.from_settings(SandboxEnv())
            try:
                return await backend.gc()
            finally:
                await backend.close()

        removed = asyncio.run(run())
        typer.echo(f"removed {removed} orphaned sandbox container(s)")

    @image_app.command("ensure")
    def image_ensure() -> None:
        """Build the sandbox image unless it is already present (fast when it is)."""
        from sandbox.image import ensure_image

        typer.echo(ensure_image(engine_client(), mode=SandboxEnv().sandbox.image_build))

    @image_app.command("build")
    def image_build(
        offline: bool = typer.Option(False, "--offline", help="debootstrap from the host's apt mirror"),
        dockerfile: bool = typer.Option(False, "--dockerfile", help="docker build (needs a registry)"),
    ) -> None:
        """(Re)build the sandbox image; by default offline unless a registry is usable."""
        from sandbox.image import build_image

        if offline and dockerfile:
            raise SandboxError("choose one of --offline and --dockerfile")
        mode = "offline" if offline else "dockerfile" if dockerfile else "auto"
        typer.echo(build_image(engine_client(), mode=mode))

    @bench.command("sandbox")
    def bench_sandbox(
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table"),
        samples: int = typer.Option(200, "--samples", min=20, help="Exec round trips measured"),
        concurrent: int = typer.Option(32, "--concurrent", min=1, help="Sandboxes held at once"),
    ) -> dict[str, Any]:
        """Cold start, warm acquire, exec round trip vs docker exec, concurrent sandboxes."""
        from sandbox.bench import run_bench

        return asyncio.run(run_bench(SandboxEnv(), samples=samples, concurrent=concurrent))
