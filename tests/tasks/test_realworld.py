"""The shipped real-world suite: recipes, repositories, SWE-bench rows and their plain-pytest ground truth.

The build test is the real one: sdists fetched with pip from the package index, repositories
built with git, environment images built offline, and ground truth computed by plain pytest in
sandboxes of each task's image (no network inside). It takes about a minute on a quiet machine.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest

from sandbox.base import SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.image import ensure_image
from sandbox.settings import SandboxSettings
from tasks.environments import environment_image
from tasks.errors import TaskError
from tasks.realworld.build import make_rows
from tasks.realworld.recipes import RECIPES_FILE, load_recipes
from tasks.realworld.repos import git
from tasks.realworld.truth import parse_summary

RECIPES = load_recipes()
SWEBENCH_FIELDS = {
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "problem_statement",
    "version",
    "environment_setup_commit",
}


def test_recipes_cover_at_least_eight_tasks_from_six_projects() -> None:
    assert len(RECIPES) >= 8
    assert len({recipe.project for recipe in RECIPES}) >= 6
    for recipe in RECIPES:
        assert recipe.fail_to_pass, recipe.instance_id
        assert (RECIPES_FILE.parent / recipe.bug).read_text().startswith("diff --git a/")


def test_recipe_errors_name_the_entry(tmp_path: Path) -> None:
    (tmp_path / "p.patch").write_text("diff --git a/x b/x\n")
    entry = {
        "instance_id": "owner__name-1",
        "repo": "owner/name",
        "project": "name",
        "version": "1.0",
        "tests": ["tests/test_x.py"],
        "origin": "injected",
        "problem_statement": "broken",
        "fail_to_pass": ["tests/test_x.py::test_a"],
        "bug": "p.patch",
    }
    path = tmp_path / "recipes.yaml"
    path.write_text(json.dumps({"tasks": [entry, {**entry, "tests": ["../escape.py"]}]}))
    with pytest.raises(TaskError, match=r"tasks\[1\]: tests: .*relative and inside"):
        load_recipes(path)
    path.write_text(json.dumps({"tasks": [entry, entry]}))
    with pytest.raises(TaskError, match="defined twice"):
        load_recipes(path)
    path.write_text(json.dumps({"tasks": [{**entry, "bug": "absent.patch"}]}))
    with pytest.raises(TaskError, match="no patch file"):
        load_recipes(path)


def test_summary_parser_reads_node_ids_with_parameters_and_messages() -> None:
    output = "\n".join(
        [
            "..F.",
            "=========================== short test summary info ============================",
            "PASSED tests/test_a.py::test_x[a b - c]",
            "PASSED tests/test_a.py::TestK::test_y",
            "FAILED tests/test_a.py::test_z[1-2] - AssertionError: assert 1 == 2",
            "ERROR tests/test_b.py::test_e - RuntimeError",
            "SKIPPED [1] tests/test_a.py:9: no reason",
            "1 failed, 2 passed, 1 skipped, 1 error in 0.1s",
        ]
    )
    assert parse_summary(output) == {
        "tests/test_a.py::test_x[a b - c]": "passed",
        "tests/test_a.py::TestK::test_y": "passed",
        "tests/test_a.py::test_z[1-2]": "failed",
        "tests/test_b.py::test_e": "error",
    }


# --- the real build --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def built(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Path, list[dict], str]]:
    """The suite's rows and repositories, built once for this module."""
    client = docker.from_env()
    base = ensure_image(client)
    backend = DockerBackend(f"test-realworld-{uuid.uuid4().hex[:8]}", None, SandboxSettings(warm_pool_size=0))
    work = tmp_path_factory.mktemp("realworld")
    try:
        rows = await make_rows(work, backend, client, base, recipes=RECIPES, env_cache_dir=work / "envs")
        yield work, rows, base
    finally:
        leaked = backend.owned_ids()
        await backend.close()
        client.close()
        assert leaked == []


@pytest.mark.docker
async def test_rows_are_swebench_format_with_plain_pytest_ground_truth(built) -> None:
    work, rows, _ = built
    assert [row["instance_id"] for row in rows] == [recipe.instance_id for recipe in RECIPES]
    on_disk = [json.loads(line) for line in (work / "rows.jsonl").read_text().splitlines()]
    assert on_disk == rows
    for row, recipe in zip(rows, RECIPES, strict=True):
        assert row.keys() >= SWEBENCH_FIELDS
        fail_to_pass, pass_to_pass = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
        # Plain pytest in the task's image agrees with the recipe, and the rest of the file stays green.
        assert fail_to_pass == sorted(recipe.fail_to_pass)
        assert pass_to_pass and not set(fail_to_pass) & set(pass_to_pass)
        assert all(node.split("::")[0] in recipe.tests for node in fail_to_pass + pass_to_pass)
        assert row["repo"] == recipe.repo and row["version"] == recipe.version
        environment = recipe.environment()
        assert row.get("environment") == (environment.model_dump() if environment else None)


@pytest.mark.docker
async def test_repositories_hold_base_commits_and_patches_rebuild_the_sdist(built) -> None:
    work, rows, _ = built
    for row, recipe in zip(rows, RECIPES, strict=True):
        repo = work / "repos" / recipe.repo.replace("/", "__")
        assert (repo / ".git").is_dir()
        files = git(repo, "ls-tree", "-r", "--name-only", row["base_commit"]).split()
        assert not set(recipe.tests) & set(files), "the graded test files are hidden from the base commit"
        check = work / f"check-{recipe.instance_id}"
        shutil.rmtree(check, ignore_errors=True)
        git(repo, "worktree", "add", "-q", "--detach", str(check), row["base_commit"])
        try:
            for patch in (row["test_patch"], row["patch"]):
                git(check, "apply", "--index", "-", input_text=patch)
            # base + test patch + gold patch == the pristine sdist (the environment set-up commit)
            diff = subprocess.run(
                ["git", "diff", "--stat", row["environment_setup_commit"]],
                cwd=check,
                capture_output=True,
                text=True,
            )
            assert diff.returncode == 0 and diff.stdout == "", diff.stdout
        finally:
            git(repo, "worktree", "remove", "--force", str(check))


@pytest.mark.docker
async def test_the_workspace_copy_is_what_runs_even_where_the_image_ships_the_package(built) -> None:
    """more-itertools ships in the image (8.10); cachetools lives under src/: the workspace's copy wins."""
    work, rows, base = built
    by_id = {row["instance_id"]: row for row in rows}
    backend = DockerBackend(
        f"test-realworld-ws-{uuid.uuid4().hex[:8]}", None, SandboxSettings(warm_pool_size=0)
    )
    try:
        for instance_id, module in (
            ("more-itertools__more-itertools-1", "more_itertools"),
            ("tkem__cachetools-1", "cachetools"),
        ):
            recipe = next(r for r in RECIPES if r.instance_id == instance_id)
            tree = work / f"tree-{instance_id}"
            repo = work / "repos" / recipe.repo.replace("/", "__")
            shutil.rmtree(tree, ignore_errors=True)
            git(repo, "worktree", "add", "-q", "--detach", str(tree), by_id[instance_id]["base_commit"])
            try:
                image = environment_image(recipe.environment(), base)
                sandbox = await backend.create(SandboxSpec(image=image, workspace=tree))
                try:
                    probe = f"import {module}; print({module}.__file__)"
                    # from /workspace as pytest runs, and from elsewhere (the .pth of src layouts)
                    here = await sandbox.exec(f"python3 -c '{probe}'")
                    elsewhere = await sandbox.exec(f"cd /tmp && python3 -c '{probe}'")
                finally:
                    await sandbox.destroy()
            finally:
                git(repo, "worktree", "remove", "--force", str(tree))
            assert here.exit_code == 0 and here.output.startswith("/workspace/"), here.output
            if recipe.import_root != ".":
                assert elsewhere.output.startswith(f"/workspace/{recipe.import_root}/"), elsewhere.output
    finally:
        await backend.close()


@pytest.mark.docker
async def test_import_gives_a_loadable_suite(built, tmp_path: Path) -> None:
    pytest.importorskip("tasks.swebench", reason="the SWE-bench importer lands with the pytest grading mode")
    from tasks.realworld.build import import_rows
    from tasks.spec import load_suite

    work, rows, base = built
    suite_dir = tmp_path / "realworld"
    import_rows(work / "rows.jsonl", work / "repos", suite_dir)
    tasks = load_suite(suite_dir)
    by_id = {task.task_id: task for task in tasks}
    assert len(by_id) == len(rows)
    for recipe in RECIPES:
        task = by_id[re.sub(r"[^a-z0-9_-]", "-", recipe.instance_id.lower())]
        assert task.resolved_image(base) == environment_image(recipe.environment(), base)
