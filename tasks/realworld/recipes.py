"""The real-world suite's recipe file (``recipes.yaml`` + ``patches/``), loaded into typed recipes.

A recipe names a PyPI project, a pinned version, a bug (a patch against the pristine sdist) and the
project's own test files that grade it; everything else (the repository, the gold patch, the
FAIL_TO_PASS / PASS_TO_PASS lists) is derived at build time, so the repository ships no project code.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tasks.environments import EnvironmentSpec
from tasks.errors import TaskError

RECIPES_DIR = Path(__file__).resolve().parent
RECIPES_FILE = RECIPES_DIR / "recipes.yaml"
_INSTANCE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*__[A-Za-z0-9][A-Za-z0-9_.-]*-\d+$")
_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")
_PTH_NAME = "rlguard-workspace.pth"


def _relative(path: str) -> str:
    if path.startswith("/") or ".." in path.split("/") or not path.strip("/."):
        raise ValueError(f"paths must be relative and inside the project; got {path!r}")
    return path


class Recipe(BaseModel):
    """One task of the suite: a project at a version, a bug, and the tests that catch it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_id: str
    repo: str = Field(description="owner/name of the upstream repository (SWE-bench's `repo`)")
    project: str = Field(description="PyPI project name")
    version: str = Field(description="Pinned version whose sdist is the repository")
    import_root: Literal[".", "src"] = "."
    import_names: list[str] = Field(
        default_factory=list,
        description="Top-level modules of the package under test (default: the project name with _ for -)",
    )
    python_packages: list[str] = Field(default_factory=list)
    tests: list[str] = Field(min_length=1, description="The project's test files that grade the task")
    origin: str = Field(min_length=1)
    problem_statement: str = Field(min_length=1)
    fail_to_pass: list[str] = Field(min_length=1, description="Expected FAIL_TO_PASS node ids")
    bug: str = Field(description="Patch file (relative to the recipe file) against the pristine sdist")

    @field_validator("instance_id")
    @classmethod
    def _instance(cls, value: str) -> str:
        if not _INSTANCE_RE.match(value):
            raise ValueError(f"instance ids look like owner__name-N; got {value!r}")
        return value

    @field_validator("repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not _REPO_RE.match(value):
            raise ValueError(f"repo must be owner/name; got {value!r}")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not _VERSION_RE.match(value):
            raise ValueError(f"not a pinned version: {value!r}")
        return value

    @field_validator("tests")
    @classmethod
    def _tests(cls, paths: list[str]) -> list[str]:
        return [_relative(path) for path in paths]

    @property
    def repo_dir_name(self) -> str:
        """The repository's directory under ``--repos``: ``owner__name`` (SWE-bench's convention)."""
        return self.repo.replace("/", "__")

    def environment(self) -> EnvironmentSpec | None:
        """The task's environment: its dependencies, its ``src/`` on ``sys.path`` when it has one, and
        the package under test kept out of the image (``exclude``: the base image or a dependency
        may bring a release of it, with the fix).

        The ``.pth`` file makes the workspace copy of the package importable the way an editable
        install would, ahead of any copy the image ships (site-packages under /usr/local come before
        Debian's dist-packages), and independently of how pytest is invoked.
        """
        setup = []
        if self.import_root != ".":
            setup.append(
                'site="$(python3 -c "import sysconfig; print(sysconfig.get_path(\'purelib\'))")" && '
                f'mkdir -p "$site" && echo /workspace/{self.import_root} > "$site/{_PTH_NAME}"'
            )
        under_test = [
            self.project,
            *(self.import_names or [self.project.replace("-", "_").replace(".", "_")]),
        ]
        spec = EnvironmentSpec(
            python_packages=self.python_packages, setup=setup, exclude=list(dict.fromkeys(under_test))
        )
        return None if spec.empty else spec


def load_recipes(path: Path = RECIPES_FILE) -> list[Recipe]:
    """Every recipe of ``path``, validated, with their patch files present and ids unique."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TaskError(f"{path}: cannot read the recipes: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("tasks"), list):
        raise TaskError(f"{path}: expected a mapping with a 'tasks' list")
    recipes = []
    for index, entry in enumerate(raw["tasks"]):
        try:
            recipe = Recipe.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise TaskError(f"{path}: tasks[{index}]: {problems}") from None
        if not (path.parent / recipe.bug).is_file():
            raise TaskError(f"{path}: {recipe.instance_id}: no patch file {recipe.bug!r}")
        recipes.append(recipe)
    ids = [recipe.instance_id for recipe in recipes]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise TaskError(f"{path}: instance ids defined twice: {duplicates}")
    return recipes


def bug_patch(recipe: Recipe, recipes_file: Path = RECIPES_FILE) -> str:
    """The text of ``recipe``'s bug patch."""
    return (recipes_file.parent / recipe.bug).read_text()


def recipes_digest(recipes_file: Path = RECIPES_FILE) -> str:
    """A hash of the recipe file and every patch it names: a built suite is current when it matches."""
    digest = hashlib.sha256(recipes_file.read_bytes())
    for recipe in load_recipes(recipes_file):
        digest.update((recipes_file.parent / recipe.bug).read_bytes())
    return digest.hexdigest()[:16]
