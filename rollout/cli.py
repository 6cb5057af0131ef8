"""Command-line sub-commands of this package (registered into ``rlguard.cli``)."""

from __future__ import annotations

import typer

policy_app = typer.Typer(help="Policy servers (OpenAI-compatible).", no_args_is_help=True)


@policy_app.command("serve")
def policy_serve(
    model: str = typer.Option("tiny", "--model", help="HF model directory, or 'tiny' (built locally)"),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N"),
    host: str | None = typer.Option(None, "--host", help="Listen address (default from settings)"),
    port: int | None = typer.Option(None, "--port", help="Listen port (default from settings)"),
) -> None:
    """Serve a HF causal LM with /v1/completions (token ids + logprobs), chat, and weight reload."""
    import uvicorn

    from rlguard.errors import RlguardError
    from rlguard.settings import get_settings
    from rollout.policy_server import build_server

    limits = get_settings().rollout.policy
    try:
        server = build_server(model, device, limits)
    except (ValueError, OSError) as exc:
        raise RlguardError(f"cannot load the model {model!r}: {exc}") from exc
    uvicorn.run(server.app, host=host or limits.host, port=port or limits.port, log_level="warning")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this package's commands to the root app and its benchmark to ``rlguard bench``."""
    app.add_typer(policy_app, name="policy")
