"""``rlguard loop --schedule async`` end to end: the tiny model on built-in tasks through real Docker."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from rlguard.cli import app
from rlguard.loops.spec import AsyncSchedule, LoopSpec
from store.models import EpisodeRow, SubTrajectoryRow
from store.repository import Store


def test_loop_shapes_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="queue_size"):
        AsyncSchedule(queue_size=2).queue_bound(episodes_per_step=4)
    with pytest.raises(ValueError, match="workers"):
        AsyncSchedule(workers=0)
    with pytest.raises(ValueError, match="group_size"):
        LoopSpec(group_size=0)
    with pytest.raises(ValueError, match="no task matches"):
        LoopSpec(task_filter=("no-such-task",)).plan()


def test_the_plan_keeps_each_tasks_group_inside_one_step() -> None:
    plan = LoopSpec(task_filter=("lru-cache", "roman-numerals", "text-wrap"), steps=3, group_size=2,
                    tasks_per_step=2).plan()  # fmt: skip
    tasks = [[episode.task_id.split("/")[1] for episode in step] for step in plan]
    assert tasks == [
        ["lru-cache", "lru-cache", "roman-numerals", "roman-numerals"],
        ["text-wrap", "text-wrap", "lru-cache", "lru-cache"],
        ["roman-numerals", "roman-numerals", "text-wrap", "text-wrap"],
    ]


def _die_silently(events) -> None:
    import os

    events.put(("result", {"status": "finished", "reward": 1.0, "versions": [[0]]}))
    events.close()
    events.join_thread()  # the result reaches the pipe; then a death with no "error" and no "done"
    os._exit(3)


def test_a_rollout_process_that_dies_unannounced_ends_the_trainers_wait() -> None:
    import multiprocessing
    import time

    from rlguard.loops.asynchronous import _RolloutState, take

    mp = multiprocessing.get_context("spawn")
    ids, events = mp.Queue(4), mp.Queue()
    process = mp.Process(target=_die_silently, args=(events,))
    process.start()
    state = _RolloutState()
    started = time.monotonic()
    assert take(ids, 2, state, events, process, timeout_s=120) == []
    process.join()
    assert time.monotonic() - started < 60  # not the 120 s timeout: the death is noticed
    assert state.error is not None and "exited (code 3)" in state.error
    assert state.results == [{"status": "finished", "reward": 1.0, "versions": [[0]]}]


@pytest.mark.docker
def test_async_loop_trains_while_rolling_out_and_records_versions(tmp_path: Path, monkeypatch) -> None:
    from rlguard.settings import get_settings

    monkeypatch.setenv("RLGUARD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RLGUARD_TRAINER__CRITIC_WARMUP_STEPS", "0")  # every step moves the version
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(
            app,
            ["loop", "--schedule", "async", "--steps", "3", "--group-size", "2", "--workers", "2",
             "--max-staleness", "1", "--task", "lru-cache", "--max-turns", "2", "--max-tokens-per-turn", "24",
             "--out", str(tmp_path / "run"), "--json"],
        )  # fmt: skip
        url = get_settings().resolved_database_url
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output + repr(result.exception)
    import json

    summary = json.loads(result.output[result.output.index("{") :])
    assert summary["episodes"] == 6 and summary["steps"] >= 2
    assert summary["policy_version"] == summary["steps"]
    assert summary["max_staleness"] <= 1 and summary["mean_staleness"] <= 1
    assert summary["rollout_stats"]["queue_high_water"] <= 4  # the bound: (K + 1) x episodes per step
    store = Store.from_url(url)
    try:
        with store.sessions() as session:
            versions = set(session.scalars(select(EpisodeRow.policy_version)))
            rows = list(session.scalars(select(SubTrajectoryRow)))
    finally:
        store.close()
    assert "0" in versions and len(versions) >= 2  # later episodes ran on pushed weights
    assert rows and all(r.version_spans for r in rows)  # every generated span carries its version
    for row in rows:
        assert all(int(v) <= summary["policy_version"] for _, _, v in row.version_spans)
    assert all(r.consumed_at is not None for r in rows)  # trained on, or dropped as too stale


def test_busy_cpu_seconds_counts_at_least_this_processs_work() -> None:
    import time

    from rlguard.loops.cpu_meter import busy_cpu_seconds

    before_busy, before_own = busy_cpu_seconds(), time.process_time()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    own = time.process_time() - before_own
    # Every process's work counts, so at least ours (clock ticks: 10 ms granularity per core).
    assert busy_cpu_seconds() - before_busy >= own - 0.05


@pytest.mark.docker
def test_loop_bench_reports_throughput_and_what_bounds_it(tmp_path: Path) -> None:
    from rlguard.loops.bench import run_loop_bench

    report = run_loop_bench(
        episodes=4, episodes_per_step=2, max_turns=1, max_tokens_per_turn=8, repeats=1, out_dir=tmp_path
    )
    assert report["async_in_flight"] == 4  # (max_staleness 1 + 1) x 2 episodes per step
    assert report["sync_episodes_per_s"] > 0 and report["async_episodes_per_s"] > 0
    assert report["async_vs_sync"] == pytest.approx(
        report["async_episodes_per_s"] / report["sync_episodes_per_s"]
    )
    cpus = report["cpus"]
    for key in ("sync_busy_cores", "async_busy_cores"):
        assert 0 < report[key] <= cpus + 0.05
    assert report["cpu_ceiling"] == pytest.approx(cpus / report["sync_busy_cores"])
    assert report["mean_staleness"] <= report["max_staleness"] and 0 <= report["dropped_fraction"] <= 1


@pytest.mark.docker
def test_async_loop_drives_a_policy_server_it_did_not_start(tmp_path: Path, monkeypatch) -> None:
    """``--policy-url`` with ``--reload-protocol sglang``: a separately running server (here
    ``rlguard policy serve`` in its own process, which speaks SGLang's ``update_weights_from_disk``)
    plays the episodes and receives every step's weights."""
    import httpx

    from rlguard.loops.processes import policy_server_process
    from rlguard.settings import get_settings
    from rollout.control import TOKEN_ENV, ReloadControl, new_token
    from rollout.tinymodel import resolve_model_name

    token = new_token()  # the external server's control token, given to the loop by the environment
    monkeypatch.setenv("RLGUARD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv(TOKEN_ENV, token)
    monkeypatch.setenv("RLGUARD_TRAINER__CRITIC_WARMUP_STEPS", "0")  # every step moves the version
    get_settings.cache_clear()
    try:
        model = resolve_model_name("tiny", get_settings().state_dir)
        control = ReloadControl(token, (tmp_path / "run" / "checkpoints",))
        with policy_server_process(model, control=control) as url:
            result = CliRunner().invoke(
                app,
                ["loop", "--schedule", "async", "--steps", "2", "--group-size", "2",
                 "--task", "roman-numerals", "--max-turns", "1", "--max-tokens-per-turn", "16",
                 "--policy-url", f"{url}/v1", "--reload-protocol", "sglang",
                 "--served-model-name", Path(model).name, "--out", str(tmp_path / "run"), "--json"],
            )  # fmt: skip
            served = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output + repr(result.exception)
    import json

    summary = json.loads(result.output[result.output.index("{") :])
    assert summary["episodes"] == 4 and summary["steps"] == 2
    # The external server now serves the last step's checkpoint under the trainer's version.
    assert served["version"] == str(summary["policy_version"]) == "2"


def _sleep_with_parent(parent_pid: int) -> None:
    """A stand-in for the rollout process: it asks to die with its parent, then waits."""
    import time

    from rlguard.loops.orphans import die_with_parent

    die_with_parent(parent_pid)
    time.sleep(300)


_KILLED_PARENT = """
import multiprocessing, os, sys, time
from tests.trainer.test_async_loop import _sleep_with_parent
from rlguard.loops.processes import policy_server_process

if __name__ == "__main__":
    child = multiprocessing.get_context("spawn").Process(target=_sleep_with_parent, args=(os.getpid(),))
    child.start()
    with policy_server_process(sys.argv[1]):
        print("ready", flush=True)
        time.sleep(300)
"""


def test_a_killed_loop_leaves_no_policy_server_or_rollout_process_behind(tmp_path: Path, monkeypatch) -> None:
    """SIGKILL runs no ``finally``: the children must end on their own (the kernel tells them)."""
    from rlguard.settings import get_settings
    from rollout.tinymodel import resolve_model_name
    from tests.support.killed_parent import parent_running

    monkeypatch.setenv("RLGUARD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RLGUARD_TRAINER__CRITIC_WARMUP_STEPS", "0")  # every step moves the version
    get_settings.cache_clear()
    try:
        model = resolve_model_name("tiny", get_settings().state_dir)
    finally:
        get_settings.cache_clear()
    with parent_running(_KILLED_PARENT, str(model)) as parent:
        assert parent.first_line == "ready"
        commands = parent.commands()
        assert any("policy serve" in c for c in commands) and any("spawn_main" in c for c in commands)
        assert parent.kill(wait_s=30) == []


@pytest.mark.docker
def test_async_grpo_trains_whole_groups_only(tmp_path: Path, monkeypatch) -> None:
    """GRPO in the asynchronous loop: a task's group is released to the trainer only when all its
    episodes have finished, so every trained group has its full size (a lone episode would be
    refused), staleness stays within K and nothing is dropped."""
    from rlguard.settings import get_settings

    monkeypatch.setenv("RLGUARD_STATE_DIR", str(tmp_path / "state"))
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(
            app,
            ["loop", "--schedule", "async", "--algo", "grpo", "--steps", "3", "--group-size", "2",
             "--max-staleness", "1", "--task", "lru-cache", "--max-turns", "2", "--max-tokens-per-turn", "24",
             "--out", str(tmp_path / "run"), "--json"],
        )  # fmt: skip
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output + repr(result.exception)
    import json

    summary = json.loads(result.output[result.output.index("{") :])
    trained = [s for s in summary["per_step"] if s["step"] is not None]
    assert trained and summary["episodes"] == 6
    for step in trained:
        assert step["metrics"]["data/group_size_min"] == 2 and step["metrics"]["data/episodes"] % 2 == 0
    assert summary["mean_staleness"] <= 1 and summary["max_staleness"] <= 1
    assert summary["dropped_episodes"] == 0


def test_grpo_with_groups_of_one_is_refused_before_anything_starts() -> None:
    from rlguard.loops.run import run_loop
    from rlguard.loops.spec import LoopSpec, SyncSchedule
    from rlguard.settings import get_settings
    from trainer.settings import TrainerSettings

    with pytest.raises(ValueError, match="group_size must be at least 2"):
        run_loop(LoopSpec(group_size=1), SyncSchedule(), get_settings(), TrainerSettings(algo="grpo"))
