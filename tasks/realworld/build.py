"""``rlguard tasks build realworld``: recipes -> sdists -> repositories -> ground truth -> rows -> suite.

Steps, each cached under the work directory so a second build of unchanged recipes is instant:

1. each project's pinned sdist is fetched with pip (``repos.fetch_sdist``);
2. each project becomes a git repository ``repos/<owner>__<name>`` with one base commit per task
   (``repos.build_project_repo``); gold and test patches are diffs against it;
3. each distinct task environment is built once (``tasks.environments``), offline;
4. plain pytest in each task's image gives FAIL_TO_PASS / PASS_TO_PASS (``truth``); the build
   fails loudly when FAIL_TO_PASS differs from the recipe's expectation or is empty;
5. the SWE-bench-format rows go to ``rows.jsonl`` and ``tasks.swebench.import_swebench`` turns them
   into the suite.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.environments import build_environments, environment_image
from tasks.errors import TaskError
from tasks.realworld.recipes import RECIPES_FILE, Recipe, load_recipes, recipes_digest
from tasks.realworld.repos import Instance, build_project_repo, fetch_sdist
from tasks.realworld.truth import GroundTruth, ground_truth

if TYPE_CHECKING:
    import docker

    from sandbox.base import SandboxBackend

SUITE_NAME = "realworld"
ROWS_FILE = "rows.jsonl"
STAMP_FILE = "build-stamp.json"
#: Ground-truth runs in flight at once (each is one sandbox running pytest).
TRUTH_CONCURRENCY = 3
#: Projects fetched (pip) and committed (git) at once.
FETCH_CONCURRENCY = 4


@dataclass(frozen=True)
class SuiteBuild:
    """What a build produced and where."""

    suite_dir: Path
    rows_path: Path
    repos_dir: Path
    instance_ids: list[str]
    cached: bool
    seconds: float


def _log(message: str) -> None:
    print(f"rlguard: {message}", file=sys.stderr, flush=True)


def swebench_row(instance: Instance, truth: GroundTruth) -> dict[str, Any]:
    """One SWE-bench-format row (node-id lists JSON-encoded, as SWE-bench stores them)."""
    recipe = instance.recipe
    row: dict[str, Any] = {
        "instance_id": recipe.instance_id,
        "repo": recipe.repo,
        "base_commit": instance.base_commit,
        "patch": instance.patch,
        "test_patch": instance.test_patch,
        "FAIL_TO_PASS": json.dumps(truth.fail_to_pass),
        "PASS_TO_PASS": json.dumps(truth.pass_to_pass),
        "problem_statement": recipe.problem_statement,
        "hints_text": "",
        "version": recipe.version,
        "environment_setup_commit": instance.environment_setup_commit,
        "created_at": "2024-01-01T00:00:00Z",
    }
    environment = recipe.environment()
    if environment is not None:
        row["environment"] = environment.model_dump()
    return row


def build_repositories(
    recipes: list[Recipe], work_dir: Path, *, log: Callable[[str], None] = _log
) -> list[Instance]:
    """Fetch every project's sdist and build its repository; instances in recipe order.

    Projects are independent, so a few run at once: most of a cold build's time is pip preparing
    each sdist's metadata, one process per project.
    """
    by_repo: dict[str, list[Recipe]] = {}
    for recipe in recipes:
        by_repo.setdefault(recipe.repo, []).append(recipe)
    for group in by_repo.values():
        versions = {(recipe.project, recipe.version) for recipe in group}
        if len(versions) != 1:
            raise TaskError(
                f"{group[0].repo}: all tasks of one repository must use one sdist; got {versions}"
            )

    def one(group: list[Recipe]) -> list[Instance]:
        sdist = fetch_sdist(group[0].project, group[0].version, work_dir / "sdists", log=log)
        return build_project_repo(sdist, group, work_dir / "repos" / group[0].repo_dir_name)

    with ThreadPoolExecutor(FETCH_CONCURRENCY, thread_name_prefix="rlguard-sdist") as pool:
        built = [instance for group in pool.map(one, by_repo.values()) for instance in group]
    instances = {instance.recipe.instance_id: instance for instance in built}
    return [instances[recipe.instance_id] for recipe in recipes]


async def compute_ground_truth(
    backend: SandboxBackend, instances: list[Instance], base_image: str
) -> dict[str, GroundTruth]:
    """Plain-pytest ground truth of every instance, a few sandboxes at a time."""
    gate = asyncio.Semaphore(TRUTH_CONCURRENCY)

    async def one(instance: Instance) -> tuple[str, GroundTruth]:
        async with gate:
            image = environment_image(instance.recipe.environment(), base_image)
            return instance.recipe.instance_id, await ground_truth(backend, instance, image)

    return dict(await asyncio.gather(*(one(instance) for instance in instances)))


def check_against_recipes(instances: list[Instance], truths: dict[str, GroundTruth]) -> None:
    """Fail loudly when plain pytest disagrees with what a recipe expects to fail before the fix."""
    problems = []
    for instance in instances:
        recipe, truth = instance.recipe, truths[instance.recipe.instance_id]
        if sorted(recipe.fail_to_pass) != truth.fail_to_pass:
            problems.append(
                f"{recipe.instance_id}: FAIL_TO_PASS by plain pytest is {truth.fail_to_pass}, "
                f"the recipe expects {sorted(recipe.fail_to_pass)}"
            )
    if problems:
        raise TaskError("ground truth differs from the recipes:\n" + "\n".join(problems))


def _stamp(recipes_file: Path, base_id: str) -> dict[str, str]:
    return {"recipes": recipes_digest(recipes_file), "base_image_id": base_id}


async def build_realworld(
    work_dir: Path,
    suite_dir: Path,
    backend: SandboxBackend,
    client: docker.DockerClient,
    base_image: str,
    *,
    recipes_file: Path = RECIPES_FILE,
    env_cache_dir: Path | None = None,
    force: bool = False,
    log: Callable[[str], None] = _log,
) -> SuiteBuild:
    """Build the suite into ``suite_dir`` (its name is the suite's); ``work_dir`` keeps the caches.

    ``env_cache_dir`` holds the wheels of environment images (default: ``work_dir/envs``).
    """
    import docker.errors

    started = time.monotonic()
    recipes = load_recipes(recipes_file)
    try:
        base_id = client.images.get(base_image).id
    except docker.errors.ImageNotFound:
        raise TaskError(f"image {base_image!r} is not present; run `rlguard sandbox image ensure`") from None
    rows_path, repos_dir, stamp_path = work_dir / ROWS_FILE, work_dir / "repos", work_dir / STAMP_FILE
    stamp = _stamp(recipes_file, base_id)
    ids = [recipe.instance_id for recipe in recipes]
    if (
        not force
        and stamp_path.is_file()
        and json.loads(stamp_path.read_text()) == stamp
        and rows_path.is_file()
        and suite_dir.is_dir()
    ):
        return SuiteBuild(suite_dir, rows_path, repos_dir, ids, True, time.monotonic() - started)
    stamp_path.unlink(missing_ok=True)
    await make_rows(
        work_dir, backend, client, base_image, recipes=recipes, env_cache_dir=env_cache_dir, log=log
    )
    import_rows(rows_path, repos_dir, suite_dir)
    stamp_path.write_text(json.dumps(stamp))
    return SuiteBuild(suite_dir, rows_path, repos_dir, ids, False, time.monotonic() - started)


async def make_rows(
    work_dir: Path,
    backend: SandboxBackend,
    client: docker.DockerClient,
    base_image: str,
    *,
    recipes: list[Recipe],
    env_cache_dir: Path | None = None,
    log: Callable[[str], None] = _log,
) -> list[dict[str, Any]]:
    """Steps 1-4: repositories in ``work_dir/repos``, environments, ground truth, ``work_dir/rows.jsonl``."""
    work_dir.mkdir(parents=True, exist_ok=True)
    instances = build_repositories(recipes, work_dir, log=log)
    await asyncio.to_thread(
        build_environments,
        client,
        [(recipe.environment(), base_image) for recipe in recipes],
        env_cache_dir or work_dir / "envs",
        log=log,
    )
    log(f"computing the ground truth of {len(instances)} tasks with plain pytest ...")
    truths = await compute_ground_truth(backend, instances, base_image)
    check_against_recipes(instances, truths)
    rows = [swebench_row(instance, truths[instance.recipe.instance_id]) for instance in instances]
    (work_dir / ROWS_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


def import_rows(rows_path: Path, repos_dir: Path, suite_dir: Path) -> list[str]:
    """Replace ``suite_dir`` with the import of ``rows_path`` (the SWE-bench importer does the work)."""
    from tasks.swebench import import_swebench

    if suite_dir.exists():
        shutil.rmtree(suite_dir)
    suite_dir.parent.mkdir(parents=True, exist_ok=True)
    return import_swebench(rows_path, repos_dir, suite_dir)
