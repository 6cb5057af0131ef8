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
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import yaml

from tasks.environments import package_under_test
from tasks.errors import TaskError
from tasks.gitenv import git_env
from tasks.safefiles import MAX_FILE_BYTES, is_real_dir, is_regular_file, kind_of, lstat_in, read_file
from tasks.testfiles import clean_name

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
MAX_PATCH_TREE_BYTES = 64 * 1024 * 1024  # what one patch may leave in hidden/ or solution/
MAX_BASE_ARCHIVE_BYTES = 256 * 1024 * 1024  # git archive of base_commit (the workspace cap is lower)
GIT_TIMEOUT_S = 300.0
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


def _limit_file_size(max_bytes: int) -> Callable[[], None]:
    """A ``preexec_fn``: no file the child writes may grow past ``max_bytes`` (SIGXFSZ kills it)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return apply


def _git(
    repo: Path,
    *args: str,
    stdin: str | None = None,
    cwd: Path | None = None,
    stdout: IO[bytes] | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> bytes:
    env = git_env(cwd or repo)
    try:
        result = subprocess.run(
            ["git", *args],
            cwd=cwd or repo,
            env=env,
            input=stdin.encode() if stdin is not None else None,
            stdout=stdout if stdout is not None else subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=GIT_TIMEOUT_S,
            preexec_fn=_limit_file_size(max_file_bytes),
        )
    except subprocess.TimeoutExpired:
        raise TaskError(f"git {' '.join(args[:3])} took over {GIT_TIMEOUT_S:g} s in {cwd or repo}") from None
    if result.returncode == -signal.SIGXFSZ:
        raise TaskError(f"git {' '.join(args[:3])} wrote a file over the {max_file_bytes}-byte limit")
    if result.returncode != 0:
        error = result.stderr.decode(errors="replace")[-500:].strip().replace("\n", " | ")
        raise TaskError(f"git {' '.join(args[:3])} failed in {cwd or repo}: {error}")
    return result.stdout or b""


_BINARY_SIZE = re.compile(r"^(?:literal|delta) (\d+)$", re.MULTILINE)


def _check_patch_sizes(patch: str, what: str, where: str) -> None:
    """Refuse a binary hunk that would inflate past the file limit (a few KB of deflated zeros can
    stand for gigabytes) before ``git apply`` writes anything."""
    for match in _BINARY_SIZE.finditer(patch):
        if int(match.group(1)) > MAX_FILE_BYTES:
            raise TaskError(
                f"{where}: the {what} has a binary file of {match.group(1)} bytes, "
                f"over the {MAX_FILE_BYTES}-byte limit"
            )


def _changed_names(numstat: bytes) -> list[str]:
    """The paths a patch leaves, from ``git apply --numstat -z`` (a rename names its new path)."""
    fields = numstat.decode("utf-8", "surrogateescape").split("\0")
    names: list[str] = []
    i = 0
    while i < len(fields):
        field = fields[i]
        if "\t" in field:
            name = field.split("\t", 2)[-1]
            if name:
                names.append(name)
            elif i + 2 < len(fields):  # rename or copy: "added\tdeleted\t\0old\0new"
                names.append(fields[i + 2])
                i += 2
        i += 1
    return names


def _apply(tree: Path, patch: str, what: str, where: str) -> list[str]:
    """Apply ``patch`` to a copy-tree with ``git apply``; the files it leaves changed.

    Every one must be a regular file inside the tree: a link (``tests/x -> /etc/passwd``), a path
    through a link, a device or a FIFO is refused, as are deletions; nothing is read here.
    """
    if not patch.strip():
        return []
    _check_patch_sizes(patch, what, where)
    try:
        _git(tree, "apply", "--whitespace=nowarn", "-", stdin=patch, cwd=tree)
        listing = _git(tree, "apply", "--numstat", "-z", "-", stdin=patch, cwd=tree)
    except TaskError as exc:
        raise TaskError(f"{where}: the {what} does not apply to base_commit: {exc}") from None
    names = _changed_names(listing)
    for name in names:
        if clean_name(name) != name:
            raise TaskError(f"{where}: the {what} names {name!r}, a path outside the tree")
        st = lstat_in(tree, name)
        if st is None:
            if os.path.lexists(tree / name):
                raise TaskError(f"{where}: the {what} puts {name!r} behind a symbolic link; not imported")
            raise TaskError(f"{where}: the {what} deletes {name!r}; deletions are not supported")
        if not stat.S_ISREG(st.st_mode):
            link = f" to {os.readlink(tree / name)!r}" if stat.S_ISLNK(st.st_mode) else ""
            raise TaskError(
                f"{where}: the {what} makes {name!r} {kind_of(st.st_mode)}{link}; "
                "only regular files are imported"
            )
    return names


def _copy_files(src: Path, names: list[str], dst: Path, what: str, where: str) -> None:
    """Copy the named regular files (checked again as they are read: no link is followed)."""
    total = 0
    for name in names:
        try:
            data = read_file(src, name, MAX_FILE_BYTES)
        except TaskError as exc:
            raise TaskError(f"{where}: the {what}: {exc}") from None
        total += len(data)
        if total > MAX_PATCH_TREE_BYTES:
            raise TaskError(f"{where}: the {what} leaves over {MAX_PATCH_TREE_BYTES} bytes of files")
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _pythonpath(workspace: Path) -> list[str]:
    """``["src"]`` for a src layout (a package under src/ and none at the top), else nothing."""
    if not is_real_dir(workspace, "src"):
        return []
    for entry in os.scandir(workspace / "src"):
        package = entry.is_dir(follow_symlinks=False)
        if package and is_regular_file(workspace, f"src/{entry.name}/__init__.py"):
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
        with archive.open("wb") as out:
            try:
                _git(clone, "archive", "--format=tar", row["base_commit"], stdout=out,
                     max_file_bytes=MAX_BASE_ARCHIVE_BYTES)  # fmt: skip
            except TaskError as exc:
                raise TaskError(f"{where}: the tree at base_commit: {exc}") from None
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
        _copy_files(tests_tree, test_names, task_dir / "hidden", "test_patch", where)
        (task_dir / "solution").mkdir()
        _copy_files(gold_tree, gold_names, task_dir / "solution", "gold patch", where)
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
        environment = dict(row["environment"])
        if "exclude" not in environment:  # the image must not hold the package under test
            environment["exclude"] = package_under_test(task_dir / "workspace")
        spec["environment"] = environment
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
    try:
        return _import_rows(Path(rows_path), Path(repos_dir), Path(out_dir))
    except OSError as exc:  # a file system refusal is one line, never a traceback
        raise TaskError(f"cannot import into {out_dir}: {exc.strerror or exc}") from None


def _import_rows(rows_path: Path, repos_dir: Path, out_dir: Path) -> list[str]:
    from tasks.spec import _load_task_dir

    rows = read_rows(rows_path)
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
            try:
                _write_task(row, repos, staged)
                _load_task_dir(staged, suite).workspace_tar()  # the suite loader's checks, now
            except TaskError as exc:
                message = str(exc)
                where = row["_where"]
                raise TaskError(message if message.startswith(where) else f"{where}: {message}") from None
            except OSError as exc:  # one line, never a traceback
                raise TaskError(f"{row['_where']}: cannot write the task: {exc.strerror or exc}") from None
            final = out / task_id
            if final.exists():
                shutil.rmtree(final)
            staged.rename(final)
        ids.append(task_id)
    return ids
