"""``rlguard sandbox exec|gc|image ensure|image build``: hardened Docker sandboxes by hand.

The benchmark (``rlguard bench sandbox``) is in ``bench.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rlguard.cli.output import group, spinner
from rlguard.cli.resources import engine_client
from rlguard.settings import Settings, get_settings
from sandbox.base import SandboxError

if TYPE_CHECKING:
    from sandbox.settings import SandboxLimits


def limits_with(configured: SandboxLimits, memory: str | None, timeout: float | None) -> SandboxLimits:
    """The configured limits with command-line overrides, validated into one clear error."""
    from pydantic import ValidationError

    from sandbox.settings import SandboxLimits, parse_size

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


async def _exec_once(
    settings: Settings, argv: list[str], image: str, limits: SandboxLimits, workspace: Path | None
) -> int:
    from sandbox.base import SandboxSpec
    from sandbox.docker_backend import DockerBackend

    backend = DockerBackend.from_settings(settings)
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


def register(app: typer.Typer) -> None:
    """Add ``rlguard sandbox``."""
    sandbox_app = group("Hardened Docker sandboxes.")
    image_app = group("The sandbox image rlguard/sandbox-python:<version>.")
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
        """Run a command in a fresh hardened sandbox.

        Prints its merged output and exits with its exit code.
        """
        from sandbox.image import default_image

        settings = get_settings()
        limits = limits_with(settings.sandbox.limits, memory, timeout)
        if workspace is not None and not workspace.is_dir():
            raise SandboxError(f"--workspace {workspace} is not a directory")
        chosen = image or settings.sandbox.image or default_image()
        engine_client(settings).close()
        raise typer.Exit(asyncio.run(_exec_once(settings, command, chosen, limits, workspace)))

    @sandbox_app.command("gc")
    def gc_command() -> None:
        """Remove orphaned sandbox containers.

        Those of this instance (RLGUARD_INSTANCE) whose owning process is gone, on every engine of
        RLGUARD_SANDBOX__ENGINES that answers.
        """
        from sandbox.fleet import FleetBackend

        settings = get_settings()

        async def run() -> int:
            backend = FleetBackend.from_settings(settings)
            try:
                await backend.connect()
                return await backend.gc()
            finally:
                await backend.close()

        removed = asyncio.run(run())
        typer.echo(f"removed {removed} orphaned sandbox container(s)")

    @image_app.command("ensure")
    def image_ensure() -> None:
        """Build the sandbox image unless it is present."""
        from sandbox.image import ensure_image

        settings = get_settings()
        typer.echo(ensure_image(engine_client(settings), mode=settings.sandbox.image_build))

    @image_app.command("build")
    def image_build(
        offline: bool = typer.Option(False, "--offline", help="debootstrap from the host's apt mirror"),
        dockerfile: bool = typer.Option(False, "--dockerfile", help="docker build (needs a registry)"),
    ) -> None:
        """Build the sandbox image again.

        By default offline (debootstrap), unless a registry is usable.
        """
        from sandbox.image import build_image

        if offline and dockerfile:
            raise SandboxError("choose one of --offline and --dockerfile")
        mode = "offline" if offline else "dockerfile" if dockerfile else "auto"
        client = engine_client(get_settings())
        with spinner(f"building the sandbox image ({mode})"):
            built = build_image(client, mode=mode)
        typer.echo(built)
