"""``rlguard demo``: the main job on embedded defaults (SQLite, the local Docker engine).

Step 1 (this issue): a small multi-file Python project's visible tests run in a hardened sandbox,
then the sandbox shows what it refuses. Later steps (episodes through the guard, training) are
added here; each step lives in its own package and is only called from this thin command.
"""

import asyncio

import typer

from rlguard.errors import RlguardError


async def _sandbox_step() -> bool:
    from rlguard.settings import get_settings
    from sandbox.base import SandboxError
    from sandbox.docker_backend import DockerBackend
    from sandbox.showcase import print_report, run_showcase

    try:
        backend = DockerBackend.from_settings(get_settings())
        try:
            report = await run_showcase(backend)
        finally:
            await backend.close()
    except SandboxError as exc:
        raise RlguardError(str(exc)) from None
    print_report(report)
    return report.ok


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add ``rlguard demo``."""

    @app.command("demo")
    def demo() -> None:
        """Run the demo: project tests in a hardened sandbox, and what the sandbox refuses."""
        from sandbox.cli import engine_client
        from sandbox.image import ensure_image

        ensure_image(engine_client())
        if not asyncio.run(_sandbox_step()):
            raise RlguardError("the sandbox step of the demo failed (see above)")
