"""Sdists fetched with pip, committed into local git repositories laid out as SWE-bench's ``--repos``.

Each project gets ``<repos>/<owner>__<name>``: ``main`` holds the pristine sdist (the environment
set-up commit); each task of the project gets a branch ``task/<instance_id>`` with one commit on
top, the bug applied and the grading test files removed — its base commit. Against that base the
gold patch (the bug reversed) and the test patch (the project's test files, unmodified) are plain
``git diff`` output, so the rows are exactly what a SWE-bench harness would read.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tasks.errors import TaskError
from tasks.gitenv import git_env
from tasks.realworld.recipes import Recipe, bug_patch

PIP_TIMEOUT_S = 300.0
MAX_SDIST_BYTES = 32 * 1024 * 1024


def _log(message: str) -> None:
    print(f"rlguard: {message}", file=sys.stderr, flush=True)


def fetch_sdist(
    project: str,
    version: str,
    cache_dir: Path,
    *,
    pip: tuple[str, ...] = (sys.executable, "-m", "pip"),
    log: Callable[[str], None] = _log,
) -> Path:
    """``NAME-VERSION.tar.gz`` from the index (``pip download --no-binary``), cached in ``cache_dir``.

    pip prepares an sdist's metadata even with ``--no-deps``; without build isolation that takes
    a second for setuptools projects, so that is tried first, and an isolated build (which fetches
    the project's build backend as wheels) only when the host lacks the backend.
    """
    dest = cache_dir / f"{project}-{version}"
    found = _sdist_in(dest)
    if found:
        return found
    dest.mkdir(parents=True, exist_ok=True)
    log(f"fetching the sdist of {project}=={version} with pip ...")
    base = [*pip, "download", "--disable-pip-version-check", "--quiet", "--no-deps", "--dest", str(dest)]
    requirement = f"{project}=={version}"
    attempts = [
        [*base, "--no-binary", ":all:", "--no-build-isolation", requirement],
        [*base, "--no-binary", project, requirement],
    ]
    error = ""
    for command in attempts:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            error = f"timed out after {PIP_TIMEOUT_S:.0f} s"
            continue
        found = _sdist_in(dest)
        if done.returncode == 0 and found:
            return found
        error = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
    raise TaskError(f"pip download of the {requirement} sdist failed:\n{error}")


def _sdist_in(directory: Path) -> Path | None:
    if not directory.is_dir():
        return None
    found = sorted(directory.glob("*.tar.gz"))
    return found[0] if found else None


def git(repo: Path, *args: str, input_text: str | None = None) -> str:
    """Run git in ``repo`` with the fixed identity; its stdout, or one clear error."""
    env = git_env(repo)
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, input=input_text, timeout=120
    )
    if done.returncode != 0:
        raise TaskError(f"git {' '.join(args[:3])} failed in {repo}: {done.stderr.strip()}")
    return done.stdout


def _unpack_sdist(sdist: Path, into: Path) -> None:
    """The sdist's single top directory's contents into ``into`` (no links, no paths outside)."""
    if sdist.stat().st_size > MAX_SDIST_BYTES:
        raise TaskError(f"{sdist}: over the {MAX_SDIST_BYTES >> 20} MiB sdist cap")
    with tempfile.TemporaryDirectory(prefix="rlguard-sdist-") as tmp, tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]
        tar.extractall(tmp, members=members, filter="data")
        tops = [p for p in Path(tmp).iterdir()]
        if len(tops) != 1 or not tops[0].is_dir():
            raise TaskError(f"{sdist}: expected one top-level directory")
        for path in tops[0].iterdir():
            shutil.move(str(path), into / path.name)
    for junk in [*into.rglob("__pycache__"), *into.rglob("*.pyc")]:
        if junk.is_dir():
            shutil.rmtree(junk, ignore_errors=True)
        elif junk.exists():
            junk.unlink()


@dataclass(frozen=True)
class Instance:
    """A recipe made concrete in its repository."""

    recipe: Recipe
    repo_dir: Path
    base_commit: str
    environment_setup_commit: str
    patch: str
    test_patch: str


def build_project_repo(sdist: Path, recipes: list[Recipe], repo_dir: Path) -> list[Instance]:
    """The repository of one project: ``main`` = the sdist, one ``task/<id>`` branch per recipe."""
    if repo_dir.exists():
        shutil.rmtree(repo_dir)
    repo_dir.mkdir(parents=True)
    _unpack_sdist(sdist, repo_dir)
    git(repo_dir, "init", "-q", "-b", "main")
    git(repo_dir, "add", "-A", "--force")
    git(repo_dir, "commit", "-q", "-m", f"{sdist.name.removesuffix('.tar.gz')} (sdist from the index)")
    pristine = git(repo_dir, "rev-parse", "HEAD").strip()
    instances = []
    for recipe in recipes:
        missing = [test for test in recipe.tests if not (repo_dir / test).is_file()]
        if missing:
            raise TaskError(f"{recipe.instance_id}: test files {missing} are not in {sdist.name}")
        git(repo_dir, "checkout", "-q", "-b", f"task/{recipe.instance_id}", pristine)
        try:
            git(repo_dir, "apply", "--index", "-", input_text=bug_patch(recipe))
        except TaskError as exc:
            raise TaskError(
                f"{recipe.instance_id}: the bug patch does not apply to {sdist.name}: {exc}"
            ) from None
        git(repo_dir, "rm", "-q", "--", *recipe.tests)
        git(repo_dir, "commit", "-q", "-m", f"{recipe.instance_id}: base")
        base = git(repo_dir, "rev-parse", "HEAD").strip()
        excludes = [f":(exclude){test}" for test in recipe.tests]
        patch = git(repo_dir, "diff", "--binary", base, pristine, "--", ".", *excludes)
        test_patch = git(repo_dir, "diff", "--binary", base, pristine, "--", *recipe.tests)
        if not patch.strip():
            raise TaskError(f"{recipe.instance_id}: the bug patch changes nothing outside the tests")
        instances.append(Instance(recipe, repo_dir, base, pristine, patch, test_patch))
        git(repo_dir, "checkout", "-q", "main")
    return instances


def graded_tree(instance: Instance) -> Path:
    """A temporary directory holding the base commit with the test patch applied (the caller removes it).

    This is what plain pytest runs on (then with the gold patch too) to compute the ground truth.
    """
    out = Path(tempfile.mkdtemp(prefix="rlguard-tree-"))
    archive = subprocess.run(
        ["git", "archive", "--format=tar", instance.base_commit],
        cwd=instance.repo_dir,
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    done = subprocess.run(
        ["git", "apply", "-"], cwd=out, input=instance.test_patch, capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        raise TaskError(
            f"{instance.recipe.instance_id}: the test patch does not apply: {done.stderr.strip()}"
        )
    return out
