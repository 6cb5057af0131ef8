"""What every loop sets up before it plays: the training run, the policy server serving the run's
checkpoint, the gateway, and the rollout spec that ties them together.

The policy server runs in a child process (its own interpreter lock), a thread, or is the server at
``spec.policy_url`` that someone else runs (weights then reach it through ``reload_protocol``); the
gateway runs in a child process or a thread of this one. All of it ends when the block ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rlguard.loops.local_gateway import LocalGateway, local_gateway
from rlguard.loops.processes import gateway_process, policy_server_process
from rlguard.loops.spec import LoopSpec
from rlguard.settings import Settings
from rollout.agent import AgentConfig
from rollout.control import ReloadControl, new_token
from rollout.policy_server import build_server
from rollout.runner import RolloutSpec
from rollout.serving import serve_in_thread
from rollout.tinymodel import resolve_model_name
from trainer.runtime import init_runtime
from trainer.settings import TrainerSettings
from trainer.train import TrainingRun, resolve_model


@dataclass(frozen=True)
class LoopServices:
    """A loop's running parts: the training run, the served policy's URL, the gateway, and the
    rollout spec (plain data, so a rollout process can be handed it)."""

    run: TrainingRun
    policy_url: str
    gateway: LocalGateway
    rollout: RolloutSpec


def open_run(spec: LoopSpec, settings: Settings, trainer: TrainerSettings) -> tuple[TrainingRun, Path]:
    """The loop's training run (resumed when ``spec.run_dir`` holds one) and the model it started from."""
    model_path = resolve_model(resolve_model_name(spec.model, settings.state_dir))
    token = settings.rollout.policy.control_token  # an external server's; a loop's own gets a fresh one
    run = TrainingRun(
        spec.run_dir,
        model_path,
        settings.resolved_database_url,
        trainer,
        init_runtime(device=spec.device),
        run_name=str(Path(spec.run_dir).resolve())[-200:],
        policy_token=token.get_secret_value() if token is not None else None,
    )
    return run, model_path


@contextlib.contextmanager
def loop_services(spec: LoopSpec, settings: Settings, trainer: TrainerSettings) -> Iterator[LoopServices]:
    """Open the run, serve its policy and a gateway; close all of it when the block ends."""
    run, model_path = open_run(spec, settings, trainer)
    try:
        with (
            _serve_policy(spec, run, settings) as policy_url,
            gateway_process(settings) if spec.gateway_process else local_gateway(settings) as gateway,
        ):
            run.policy_url = policy_url
            rollout = rollout_spec(spec, settings, gateway, policy_url, model_path, run)
            yield LoopServices(run, policy_url, gateway, rollout)
    finally:
        run.close()


def rollout_spec(
    spec: LoopSpec,
    settings: Settings,
    gateway: LocalGateway,
    policy_url: str,
    model_path: Path,
    run: TrainingRun,
) -> RolloutSpec:
    """What the loop's rollout needs, as plain data."""
    return RolloutSpec(
        gateway_url=gateway.url,
        admin_token=gateway.admin_token,
        suites=spec.suites,
        policy="completions",
        policy_url=f"{policy_url}/v1",
        served_model_name=spec.served_model_name,
        model=str(model_path),
        policy_version=str(run.trainer.policy_version),
        config=AgentConfig.from_settings(
            settings.rollout, max_turns=spec.max_turns, max_tokens_per_turn=spec.max_tokens_per_turn
        ),
    )


def _serve_policy(
    spec: LoopSpec, run: TrainingRun, settings: Settings
) -> contextlib.AbstractContextManager[str]:
    """The policy server serving the run's current checkpoint under its version; yields its base URL."""
    if spec.policy_url is not None:
        return _external_policy(run, spec.policy_url)
    version = str(run.trainer.policy_version)
    control = run_reload_control(run)
    if spec.server_process:
        return policy_server_process(run.policy_checkpoint, spec.device, version, control=control)
    server = build_server(str(run.policy_checkpoint), spec.device, settings.rollout.policy, control=control)
    server.version = version
    return serve_in_thread(server.app, startup_timeout_s=120)


def run_reload_control(run: TrainingRun) -> ReloadControl:
    """A fresh token for this run's policy server, shared with the run's weight sync only; reloads
    read only under the run's checkpoint folder (``rollout.control``)."""
    checkpoints = run.run_dir / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    control = ReloadControl(new_token(), (checkpoints,))
    run.policy_token = control.token
    return control


@contextlib.contextmanager
def _external_policy(run: TrainingRun, url: str) -> Iterator[str]:
    """An external server starts on the base model: a resumed run pushes its checkpoint first."""
    base = url.rstrip("/").removesuffix("/v1")
    if run.trainer.policy_version:
        run.policy_url = base
        run.weight_sync().push(run.policy_checkpoint, str(run.trainer.policy_version))
    yield base
