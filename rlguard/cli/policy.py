"""``rlguard policy serve``: an OpenAI-compatible policy server over a HF causal LM."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rlguard.cli.output import group, line, spinner
from rlguard.settings import get_settings
from rollout.errors import RolloutError

if TYPE_CHECKING:
    from rollout.control import ReloadControl
    from rollout.settings import PolicyServerSettings

policy_app = group("Policy servers (OpenAI-compatible).")
MODEL_HELP = "A HF model directory, or 'tiny' (the small demo model, built locally on first use)"


def check_model(model: str) -> Path:
    """The model directory ``model`` names ('tiny' is built on first use); one error when it is not one."""
    from rollout.tinymodel import resolve_model_name

    path = resolve_model_name(model, get_settings().state_dir)
    if not path.is_dir():
        raise RolloutError(f"--model {model}: not a model directory (nor 'tiny')")
    return path


@policy_app.command("serve")
def policy_serve(
    model: str = typer.Option("tiny", "--model", help=MODEL_HELP),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N"),
    host: str | None = typer.Option(
        None, "--host", help="Listen address (default: RLGUARD_ROLLOUT__POLICY__HOST)"
    ),
    port: int | None = typer.Option(
        None,
        "--port",
        min=0,
        max=65535,
        help="Listen port; 0 picks a free one (default: RLGUARD_ROLLOUT__POLICY__PORT)",
    ),
    reload_root: list[Path] = typer.Option(
        [], "--reload-root", help="A directory reloads may read from (repeatable; a run's checkpoints/)"
    ),
) -> None:
    """Serve a model to rollouts, OpenAI-compatible.

    Endpoints: /v1/completions (token ids and logprobs), /v1/chat/completions and a weight reload.
    It prints its URL once the model is loaded. Reloads need the bearer token in
    RLGUARD_ROLLOUT__POLICY__CONTROL_TOKEN (the trainer sends the same one) and read only under
    --reload-root; without a token they refuse everyone.
    """
    from transformers.utils import logging as hf_logging

    from rlguard.cli import serving
    from rollout.policy_server import build_server

    limits = get_settings().rollout.policy
    sock = serving.bind(host or limits.host, limits.port if port is None else port, "policy server")
    try:
        control = _reload_control(limits, reload_root)
        path = check_model(model)
        hf_logging.disable_progress_bar()  # the spinner shows the load
        with spinner(f"loading {model} on {device}"):
            try:
                server = build_server(
                    path, device, limits, name="tiny" if model == "tiny" else None, control=control
                )
            except (ValueError, OSError, RuntimeError) as exc:
                reason = " ".join(str(exc).split())[:300]
                raise RolloutError(f"cannot load the model {model!r}: {reason}") from None
        serving.serve(
            server.app, sock, "policy server", f"rlguard policy server ({server.name}) at {{url}}/v1"
        )
    finally:
        sock.close()


def _reload_control(limits: PolicyServerSettings, reload_root: list[Path]) -> ReloadControl | None:
    """Who may reload weights, and from where: nobody without a control token."""
    from rollout.control import ReloadControl

    token = limits.control_token.get_secret_value() if limits.control_token is not None else ""
    if not token:
        line("reload endpoints disabled: RLGUARD_ROLLOUT__POLICY__CONTROL_TOKEN is not set")
        return None
    roots = [*reload_root, *(Path(r) for r in limits.reload_roots)]
    if not roots:
        raise RolloutError("a control token is set but no --reload-root: give the run's checkpoints/")
    try:
        return ReloadControl(token, tuple(roots))
    except ValueError as exc:
        raise RolloutError(str(exc)) from None


def register(app: typer.Typer) -> None:
    """Add ``rlguard policy``."""
    app.add_typer(policy_app, name="policy")
