"""Round 3, finding 2: the policy server reloaded weights for anyone.

The attacks, each against the real ``rlguard policy serve`` app on a loopback port with the real
tiny model: with no credentials ``POST /reload_weights`` answered 200 and served the caller's
directory under the caller's version label; error messages told whether a host path exists; a
planted pickle got an unhandled 500. Now a reload needs the run's bearer token (one 401 for every
other request), reads only directories under the run's checkpoint folder, answers every path
refusal with the same words, and refuses pickled weights with a 400, never unpickling them.
"""

from __future__ import annotations

import os
import pickle
import shutil
import time
from pathlib import Path

import httpx
import pytest

from rollout.control import REFUSED_LOAD, REFUSED_PATH, ReloadControl
from rollout.hf_engine import HFEngine
from rollout.policy_server import PolicyServer
from rollout.serving import serve_in_thread
from rollout.settings import PolicyServerSettings
from tests.rollout.conftest import CONTROL_TOKEN

ENDPOINTS = ("/reload_weights", "/update_weights_from_disk")


def _reload(url: str, endpoint: str, path: str, headers: dict[str, str] | None = None, **extra: str):
    key = "model_path" if endpoint == "/update_weights_from_disk" else "path"
    return httpx.post(f"{url}{endpoint}", json={key: path, **extra}, headers=headers, timeout=120)


AUTH = {"Authorization": f"Bearer {CONTROL_TOKEN}"}


@pytest.fixture
def attacker_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """A perfectly loadable model directory of the attacker's, outside the run's checkpoint folder."""
    target = tmp_path / "attacker" / "model"
    shutil.copytree(tiny_model_dir, target)
    return target


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {"Authorization": "Bearer wrong-token-0123456789abcdef"},
        {"Authorization": f"Bearer {CONTROL_TOKEN[:-1]}"},
        {"Authorization": f"Bearer {CONTROL_TOKEN}x"},
        {"Authorization": f"Basic {CONTROL_TOKEN}"},
        {"Authorization": "Bearer"},
        {"X-Api-Key": CONTROL_TOKEN},
    ],
)
def test_a_reload_without_the_runs_token_is_one_401(
    policy_server, attacker_checkpoint: Path, headers
) -> None:
    version, reloads = policy_server.version, policy_server.reloads
    bodies = set()
    for endpoint in ENDPOINTS:
        answer = _reload(policy_server.url, endpoint, str(attacker_checkpoint), headers, version="pwned")
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
        bodies.add(answer.text)
    assert len(bodies) == 1 and "unauthorized" in bodies.pop()
    assert (policy_server.version, policy_server.reloads) == (version, reloads)
    assert policy_server.engine.model_path != attacker_checkpoint


def test_a_server_without_a_token_refuses_every_reload(
    tiny_model_dir: Path, attacker_checkpoint: Path
) -> None:
    server = PolicyServer(HFEngine(tiny_model_dir), "tiny", PolicyServerSettings())
    with serve_in_thread(server.app) as url:
        for headers in (None, AUTH, {"Authorization": "Bearer anything-at-all-1234567"}):
            for endpoint in ENDPOINTS:
                answer = _reload(url, endpoint, str(attacker_checkpoint), headers)
                assert answer.status_code == 401
    assert server.reloads == 0 and server.version == "0"


def test_paths_outside_the_checkpoint_folder_get_one_answer_that_names_nothing(
    policy_server, attacker_checkpoint: Path, tmp_path: Path
) -> None:
    root = policy_server.reload_root
    escape = root / "escape-link"
    if not escape.is_symlink():
        os.symlink(attacker_checkpoint, escape, target_is_directory=True)
    probes = [
        str(attacker_checkpoint),  # a real, loadable model elsewhere
        "/etc",  # exists
        "/no/such/directory",  # does not
        str(root),  # the folder itself is not a checkpoint
        str(root / ".." / "attacker"),
        str(escape),  # a link inside the folder that leads out
        str(root / "missing"),
        "relative/path",
        "",
    ]
    answers = set()
    for path in probes:
        answer = _reload(policy_server.url, "/reload_weights", path or " ", AUTH)
        assert answer.status_code == 400, (path, answer.text)
        message = answer.json()["error"]["message"]
        answers.add(message)
        assert (path.strip() or "@") not in message and "/" not in message
    assert answers == {REFUSED_PATH}
    assert policy_server.engine.model_path != attacker_checkpoint


class _Planted:
    """Unpickling this runs a command: what a planted ``pytorch_model.bin`` would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_planted_pickle_is_a_400_and_never_unpickled(
    policy_server, tiny_model_dir: Path, tmp_path: Path
) -> None:
    root = policy_server.reload_root
    planted = root / "step-999999" / "actor"
    planted.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(tiny_model_dir):
        if not name.endswith(".safetensors"):
            shutil.copy(tiny_model_dir / name, planted / name)
    marker = tmp_path / "pickle-ran"
    with (planted / "pytorch_model.bin").open("wb") as handle:
        pickle.dump({"model.embed_tokens.weight": _Planted(marker)}, handle)
    garbage = root / "step-999998" / "actor"
    shutil.copytree(planted, garbage, dirs_exist_ok=True)
    (garbage / "pytorch_model.bin").unlink()
    (garbage / "model.safetensors").write_bytes(b"\x00" * 64)
    version = policy_server.version
    for directory in (planted, garbage):
        answer = _reload(policy_server.url, "/reload_weights", str(directory), AUTH, version="planted")
        assert answer.status_code == 400 and answer.json()["error"]["message"] == REFUSED_LOAD
    time.sleep(0.2)
    assert not marker.exists()
    assert policy_server.version == version and policy_server.engine.model_path != planted


def test_a_bad_version_label_is_refused(policy_server) -> None:
    for version in ("x" * 65, "evil\nlabel", "../../v"):
        answer = _reload(policy_server.url, "/reload_weights", "/x", AUTH, version=version)
        assert answer.status_code == 400


def test_the_models_listing_names_no_host_path(policy_server) -> None:
    listing = httpx.get(f"{policy_server.url}/v1/models", timeout=30).json()["data"][0]
    assert "/" not in str(listing["root"])


def test_the_loops_child_server_gets_its_token_by_environment_and_the_trainer_sends_it(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The loop's own server: a fresh token per run, never on the child's argv (world-readable in
    /proc), accepted from the run's weight sync, refused from anyone else."""
    from rlguard.loops.processes import policy_server_process
    from rollout.control import new_token
    from trainer.errors import TrainerError
    from trainer.reload import make_weight_sync

    checkpoints = tmp_path / "run" / "checkpoints"
    step = checkpoints / "step-000001" / "actor"
    shutil.copytree(tiny_model_dir, step)
    control = ReloadControl(new_token(), (checkpoints,))
    with policy_server_process(tiny_model_dir, control=control) as url:
        port = url.rsplit(":", 1)[1]
        cmdlines = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes())
            except OSError:
                continue
        child = [c for c in cmdlines if b"policy\0serve" in c and port.encode() in c]
        assert len(child) == 1 and control.token.encode() not in child[0]
        assert _reload(url, "/reload_weights", str(step)).status_code == 401
        with pytest.raises(TrainerError, match="refused"):
            make_weight_sync("builtin", f"{url}/v1").push(step, "1")
        answer = make_weight_sync("builtin", f"{url}/v1", token=control.token).push(step, "1")
        assert answer["success"] and answer["version"] == "1"
        assert control.token not in str(answer)
