"""Import SWE-bench-format rows into rlguard tasks (``rlguard tasks import swebench``).

A row carries SWE-bench's fields (``instance_id``, ``repo``, ``base_commit``, ``patch``,
``test_patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS`` as JSON-encoded lists of pytest node ids,
``problem_statement``, ``version``, ``environment_setup_commit``) and optionally rlguard's
``environment`` (passed through to ``task.yaml``). Repositories come from local clones at
``<repos>/<owner>__<name>``; nothing is fetched.

Each row becomes ``<out>/<task id>/``:

* ``workspace/``: the repository's tree at ``base_commit`` (``git archive``: no history, no refs);
  the agent gets it as a one-commit repository (``git`` spec), so no later commit is reachable;
* ``hidden/``: the files the ``test_patch`` adds or changes, as they are after it (the pristine
  tests; they reach a container only at grading);
* ``solution/``: the files the gold ``patch`` changes, as they are after it;
* ``task.yaml``: ``grading.mode: pytest``, ``reward: all_or_nothing`` (SWE-bench "resolved"), the
  node ids; ``source.json``: the row's identifying fields.

Every row is checked before anything is written, and every written task is loaded back (the same
validation as suite loading), so a bad row is refused at import with the row and the field named.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tasks.errors import TaskError
from tasks.gitenv import git_env

REQUIRED_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
MAX_ROWS_BYTES = 512 * 1024 * 1024
GRADING_TIMEOUT_S = 600.0
_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{7,40}$")
_TASK_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def task_id_for(instance_id: str) -> str:
    """The instance id lowercased, characters outside ``[a-z0-9_-]`` replaced by ``-``."""
    return re.sub(r"[^a-z0-9_-]", "-", instance_id.lower())


def _node_ids(row: dict[str, Any], key: str, where: str) -> list[str]:
    value = row[key]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise TaskError(f"{where}: field {key!r} is not a JSON-encoded list: {exc}") from None
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise TaskError(f"{where}: field {key!r} must be a list of pytest node ids")
    return value


def read_rows(rows_path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file (or a JSON list), each checked for SWE-bench's fields."""
    try:
        if rows_path.stat().st_size > MAX_ROWS_BYTES:
            raise TaskError(f"{rows_path}: over {MAX_ROWS_BYTES} bytes")
        text = rows_path.read_text()
    except OSError as exc:
        raise TaskError(f"{rows_path}: cannot read: {exc.strerror}") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(stripped)
        except ValueError as exc:
            raise TaskError(f"{rows_path}: not valid JSON: {exc}") from None
        numbered = list(enumerate(rows, 1))
    else:
        numbered = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    numbered.append((number, json.loads(line)))
                except ValueError as exc:
                    raise TaskError(f"{rows_path}:{number}: not a JSON object: {exc}") from None
    if not numbered:
        raise TaskError(f"{rows_path}: no rows")
    out: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for number, row in numbered:
        where = f"{rows_path}:{number}"
        if not isinstance(row, dict):
            raise TaskError(f"{where}: a row must be a JSON object")
        missing = [key for key in REQUIRED_FIELDS if key not in row]
        if missing:
            raise TaskError(f"{where}: missing field(s) {missing}")
        for key in ("instance_id", "repo", "base_commit", "patch", "test_patch"):
            if not isinstance(row[key], str):
                raise TaskError(f"{where}: field {key!r} must be a string")
        if not _REPO_RE.match(row["repo"]):
            raise TaskError(f"{where}: field 'repo' must be owner/name, got {row['repo']!r}")
        if not _COMMIT_RE.match(row["base_commit"]):
            raise TaskError(
                f"{where}: field 'base_commit' must be a hex commit id, got {row['base_commit']!r}"
            )
        if not row["patch"].strip():
            raise TaskError(f"{where}: field 'patch' (the gold patch) is empty")
        task_id = task_id_for(row["instance_id"])
        if not _TASK_ID_RE.match(task_id):
            raise TaskError(
                f"{where}: instance id {row['instance_id']!r} gives task id {task_id!r}, not valid"
            )
        if task_id in seen:
            raise TaskError(f"{where}: task id {task_id!r} also comes from {seen[task_id]}")
        seen[task_id] = where
        env = row.get("environment")
        if env is not None and not isinstance(env, dict):
            raise TaskError(f"{where}: field 'environment' must be a mapping")
        fail_to_pass = _node_ids(row, "FAIL_TO_PASS", where)
        pass_to_pass = _node_ids(row, "PASS_TO_PASS", where)
        if not fail_to_pass and not pass_to_pass:
            raise TaskError(f"{where}: FAIL_TO_PASS and PASS_TO_PASS are both empty")
        out.append({**row, "FAIL_TO_PASS": fail_to_pass, "PASS_TO_PASS": pass_to_pass, "_where": where})
    return out


def _git(repo: Path, *args: str, stdin: str | None = None, cwd: Path | None = None) -> bytes:
    env = git_env(cwd or repo)
    result = subprocess.run(
        ["git", *args],
        cwd=cwd or repo,
        env=env,
        input=stdin.encode() if stdin is not None else None,
        capture_output=True,
        timeout=300,
    )
    if result.returncode != 0:
        raise TaskError(
            f"git {' '.join(args[:3])} failed in {cwd or repo}: {result.stderr.decode()[-500:].strip()}"
        )
    return result.stdout


def _apply(tree: Path, patch: str, what: str, where: str) -> list[str]:
    """Apply ``patch`` to a copy-tree with ``git apply``; the files it leaves changed (no deletions)."""
    if not patch.strip():
        return []
    try:
        _git(tree, "apply", "--whitespace=nowarn", "-", stdin=patch, cwd=tree)
        listing = _git(tree, "apply", "--numstat", "-z", "-", stdin=patch, cwd=tree)
    except TaskError as exc:
        raise TaskError(f"{where}: the {what} does not apply to base_commit: {exc}") from None
    names = [field.split("\t")[-1] for field in listing.decode().split("\0") if "\t" in field]
    deleted = [name for name in names if not (tree / name).exists()]
    if deleted:
        raise TaskError(f"{where}: the {what} deletes files {deleted[:5]}; deletions are not supported")
    return names


def _copy_files(src: Path, names: list[str], dst: Path) -> None:
    for name in names:
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / name, target)


def _pythonpath(workspace: Path) -> list[str]:
    """``["src"]`` for a src layout (a package under src/ and none at the top), else nothing."""
    src = workspace / "src"
    if src.is_dir() and any((p / "__init__.py").is_file() for p in src.iterdir() if p.is_dir()):
        return ["src"]
    return []


def _write_task(row: dict[str, Any], repos_dir: Path, task_dir: Path) -> None:
    where = row["_where"]
    clone = repos_dir / row["repo"].replace("/", "__")
    if not (clone / ".git").exists() and not (clone / "HEAD").is_file():
        raise TaskError(f"{where}: no local clone of {row['repo']} at {clone}")
    try:
        _git(clone, "cat-file", "-e", f"{row['base_commit']}^{{commit}}")
    except TaskError:
        raise TaskError(f"{where}: base_commit {row['base_commit']} is not in {clone}") from None
    with tempfile.TemporaryDirectory(prefix="rlguard-swebench-") as tmp:
        archive = Path(tmp) / "base.tar"
        archive.write_bytes(_git(clone, "archive", "--format=tar", row["base_commit"]))
        base = Path(tmp) / "base"
        base.mkdir()
        with tarfile.open(archive) as tar:
            try:
                tar.extractall(base, filter="data")
            except tarfile.TarError as exc:
                raise TaskError(
                    f"{where}: the tree at base_commit cannot be extracted safely: {exc}"
                ) from None
        tests_tree, gold_tree = Path(tmp) / "tests", Path(tmp) / "gold"
        shutil.copytree(base, tests_tree, symlinks=True)
        shutil.copytree(base, gold_tree, symlinks=True)
        test_names = _apply(tests_tree, row["test_patch"], "test_patch", where)
        gold_names = _apply(gold_tree, row["patch"], "gold patch", where)
        task_dir.mkdir(parents=True)
        shutil.copytree(base, task_dir / "workspace", symlinks=True)
        (task_dir / "hidden").mkdir()
        _copy_files(tests_tree, test_names, task_dir / "hidden")
        (task_dir / "solution").mkdir()
        _copy_files(gold_tree, gold_names, task_dir / "solution")
    statement = str(row.get("problem_statement") or "").strip() or f"Fix the failing tests of {row['repo']}."
    spec: dict[str, Any] = {
        "instructions": f"{statement}\n\nThe repository is in /workspace. Fix the issue in its code.\n",
        "horizon": "long",
        "git": {"branch": "main", "message": f"{row['repo']} at {row['base_commit'][:12]}"},
        "grading": {
            "mode": "pytest",
            "reward": "all_or_nothing",
            "timeout_s": GRADING_TIMEOUT_S,
            "restore": [],
            "fail_to_pass": row["FAIL_TO_PASS"],
            "pass_to_pass": row["PASS_TO_PASS"],
            "pythonpath": _pythonpath(task_dir / "workspace"),
        },
    }
    if row.get("environment") is not None:
        spec["environment"] = row["environment"]
    (task_dir / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=100))
    source = {
        key: row.get(key)
        for key in ("instance_id", "repo", "base_commit", "version", "environment_setup_commit")
    }
    (task_dir / "source.json").write_text(json.dumps(source, indent=1) + "\n")


def import_swebench(rows_path: str | Path, repos_dir: str | Path, out_dir: str | Path) -> list[str]:
    """Import every row of ``rows_path`` into the suite ``out_dir``; the task ids written, in row order.

    A task directory of the same id is replaced. Nothing is written when any row is invalid; a row
    whose repository, commit or patches fail stops the import with the row named (tasks imported
    before it stay).
    """
    from tasks.spec import _load_task_dir

    rows = read_rows(Path(rows_path))
    repos, out = Path(repos_dir), Path(out_dir)
    if not repos.is_dir():
        raise TaskError(f"--repos {repos}: not a directory")
    suite = out.resolve().name
    if not _TASK_ID_RE.match(suite):
        raise TaskError(f"{out}: the suite directory's name must match {_TASK_ID_RE.pattern}")
    out.mkdir(parents=True, exist_ok=True)
    ids: list[str] = []
    for row in rows:
        task_id = task_id_for(row["instance_id"])
        with tempfile.TemporaryDirectory(prefix=".import-", dir=out) as staging:
            staged = Path(staging) / task_id
            _write_task(row, repos, staged)
            try:
                _load_task_dir(staged, suite).workspace_tar()  # the suite loader's checks, now
            except TaskError as exc:
                raise TaskError(f"{row['_where']}: {exc}") from None
            final = out / task_id
            if final.exists():
                shutil.rmtree(final)
            staged.rename(final)
        ids.append(task_id)
    return ids
