"""Round 3, finding 1: the importer and every reader of task trees follow no link out of the tree.

Each test is the attack as the red team ran it, against real ``git``, real files and the real
command line: a ``test_patch`` (or gold patch) that creates ``tests/fixture.txt -> /etc/...``,
``-> /proc/self/environ`` or ``tests/blob.bin -> /dev/zero``; a binary hunk that inflates to
gigabytes; a suite whose ``hidden/``, ``solution/`` or ``workspace/`` holds a link, a FIFO or a
device. Before the fix the link's target was copied into the suite as a plain file (host secrets
in the hidden tests, a disk filled by ``/dev/zero``) and ``pristine_members()`` read ``hidden/``
through links. Now each is refused with one line naming the path, and nothing of the target is
ever read.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest

from tasks.errors import TaskError
from tasks.gitenv import git_env
from tasks.spec import load_suite
from tasks.swebench import import_swebench

HOST_SECRET = "rlguard-host-secret-7f3a91"


def _git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=git_env(cwd), input=stdin, capture_output=True, check=True
    )
    return result.stdout.decode()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A local clone ``repos/acme__widget`` with one commit: a module and its test."""
    clone = tmp_path / "repos" / "acme__widget"
    (clone / "tests").mkdir(parents=True)
    (clone / "widget.py").write_text("def add(a, b):\n    return a - b\n")
    (clone / "tests" / "test_widget.py").write_text(
        "from widget import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    _git(clone, "init", "-q", "-b", "main")
    _git(clone, "add", "-A")
    _git(clone, "commit", "-q", "-m", "base")
    return tmp_path / "repos", _git(clone, "rev-parse", "HEAD").strip()


GOLD = (
    "diff --git a/widget.py b/widget.py\n--- a/widget.py\n+++ b/widget.py\n"
    "@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
)


def _patch_making(repos: Path, make) -> str:
    """A real ``git diff`` of a working copy changed by ``make(work)`` (links stay links in it)."""
    work = repos / "acme__widget"
    make(work)
    _git(work, "add", "-A")
    patch = _git(work, "diff", "--cached", "--binary", "HEAD")
    _git(work, "reset", "-q", "--hard", "HEAD")
    return patch


def _row(base: str, test_patch: str, patch: str = GOLD) -> dict:
    return {
        "instance_id": "acme__widget-1",
        "repo": "acme/widget",
        "base_commit": base,
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps(["tests/test_widget.py::test_add"]),
        "PASS_TO_PASS": "[]",
    }


def _rows(path: Path, *rows: dict) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _import_cli(rows: Path, repos: Path, out: Path) -> subprocess.CompletedProcess[str]:
    command = ["tasks", "import", "swebench", str(rows), "--repos", str(repos), "--out", str(out)]
    return subprocess.run(
        [sys.executable, "-m", "rlguard", *command], capture_output=True, text=True, timeout=120
    )


def _suite_bytes(out: Path) -> bytes:
    """Every byte the import left under ``out`` (files only, links not followed)."""
    data = b""
    for root, _dirs, files in os.walk(out):
        for name in files:
            path = Path(root) / name
            if path.is_file() and not path.is_symlink():
                data += path.read_bytes()
    return data


def _link(name: str, target: str):
    def make(work: Path) -> None:
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, work / name)

    return make


@pytest.mark.parametrize(
    "target", ["/etc/hostname", "/proc/self/environ", "../../../../etc/passwd", "/dev/zero"]
)
def test_a_test_patch_link_out_of_the_tree_is_refused_and_nothing_is_read(
    repo, tmp_path: Path, monkeypatch, target: str
) -> None:
    monkeypatch.setenv("RLGUARD_ADMIN_TOKEN", HOST_SECRET)  # what /proc/self/environ would leak
    repos, base = repo
    name = "tests/blob.bin" if target == "/dev/zero" else "tests/fixture.txt"
    patch = _patch_making(repos, _link(name, target))
    assert "new file mode 120000" in patch
    out = tmp_path / "suite"
    with pytest.raises(TaskError) as refused:
        import_swebench(_rows(tmp_path / "rows.jsonl", _row(base, patch)), repos, out)
    message = str(refused.value)
    assert "\n" not in message and "rows.jsonl:1" in message
    assert f"makes '{name}' a symbolic link" in message
    assert not list(out.glob("*/task.yaml"))
    assert HOST_SECRET.encode() not in _suite_bytes(out)


def test_a_gold_patch_link_is_refused_too(repo, tmp_path: Path) -> None:
    repos, base = repo
    gold = _patch_making(repos, _link("widget_link.py", "/etc/hostname"))
    with pytest.raises(TaskError, match=r"gold patch makes 'widget_link\.py' a symbolic link"):
        import_swebench(_rows(tmp_path / "rows.jsonl", _row(base, "", gold)), repos, tmp_path / "suite")


def test_a_regular_file_behind_an_in_tree_link_is_refused(repo, tmp_path: Path) -> None:
    """``tests/data -> ..`` in the base tree, then a patch file reached through it."""
    repos, base = repo

    def make(work: Path) -> None:
        os.symlink("..", work / "tests" / "up")

    linked_base_patch = _patch_making(repos, make)
    work = repos / "acme__widget"
    _git(work, "apply", "-", stdin=linked_base_patch.encode())
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "a link in the base")
    base2 = _git(work, "rev-parse", "HEAD").strip()
    # git itself refuses to write beyond a link; the importer says so in one line
    beyond = (
        "diff --git a/tests/up/x.py b/tests/up/x.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/up/x.py\n@@ -0,0 +1 @@\n+x = 1\n"
    )
    with pytest.raises(TaskError) as refused:
        import_swebench(_rows(tmp_path / "rows.jsonl", _row(base2, beyond)), repos, tmp_path / "s1")
    assert "\n" not in str(refused.value) and "test_patch" in str(refused.value)
    del base


def test_a_binary_hunk_that_inflates_past_the_limit_is_refused_before_it_is_written(
    repo, tmp_path: Path
) -> None:
    repos, base = repo
    size = 4 * 1024**3  # 4 GiB of zeros: a few MB of patch
    chunk = zlib.compress(b"\0" * (1 << 20), 9)
    body = base64.b85encode(chunk[:52]).decode()  # the size line is what matters; body is cut
    patch = (
        "diff --git a/tests/blob.bin b/tests/blob.bin\nnew file mode 100644\n"
        f"index 0000000..1111111\nGIT binary patch\nliteral {size}\nz{body}\n\nliteral 0\nHcmV?d00001\n\n"
    )
    with pytest.raises(TaskError, match=rf"binary file of {size} bytes, over the \d+-byte limit"):
        import_swebench(_rows(tmp_path / "rows.jsonl", _row(base, patch)), repos, tmp_path / "suite")
    assert not (tmp_path / "suite" / "acme__widget-1").exists()


def test_an_honest_row_still_imports(repo, tmp_path: Path) -> None:
    repos, base = repo

    def make(work: Path) -> None:
        test = "from widget import add\n\n\ndef test_more():\n    assert add(2, 2) == 4\n"
        (work / "tests" / "test_more.py").write_text(test)

    patch = _patch_making(repos, make)
    ids = import_swebench(_rows(tmp_path / "rows.jsonl", _row(base, patch)), repos, tmp_path / "suite")
    (task,) = load_suite(tmp_path / "suite")
    assert ids == ["acme__widget-1"] and set(task.hidden_files()) == {"tests/test_more.py"}


def test_the_command_line_says_one_line_and_exit_code_2(repo, tmp_path: Path) -> None:
    repos, base = repo
    patch = _patch_making(repos, _link("tests/fixture.txt", "/proc/self/environ"))
    rows = _rows(tmp_path / "rows.jsonl", _row(base, patch))
    run = _import_cli(rows, repos, tmp_path / "suite")
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert "symbolic link" in run.stderr
    # an OSError (the suite path is a file) is one line too
    (tmp_path / "afile").write_text("x")
    honest = _rows(tmp_path / "rows2.jsonl", _row(base, ""))
    run = _import_cli(honest, repos, tmp_path / "afile" / "suite")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------- suites on disk: every reader in tasks/
@pytest.fixture
def authored(tmp_path: Path) -> Path:
    """A copy of a built-in isolated task and an imported pytest-mode one, to plant things in."""
    import shutil

    from tasks.spec import BUILTIN_SUITES_DIR

    suite = tmp_path / "planted"
    shutil.copytree(BUILTIN_SUITES_DIR / "builtin" / "roman-numerals", suite / "roman-numerals")
    return suite


def _plant(path: Path, kind: str, target: str = "/etc/hostname") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link":
        os.symlink(target, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.mknod(path, 0o600 | 0o020000, os.makedev(1, 5))  # /dev/zero's numbers
    elif kind == "dirlink":
        os.symlink(target, path, target_is_directory=True)


@pytest.mark.parametrize(
    ("where", "kind"),
    [
        ("hidden/test_leak.py", "link"),
        ("hidden/fixture.txt", "fifo"),
        ("hidden/zero.bin", "device"),
        ("solution/numerals/__init__.py", "link"),
        ("workspace/notes.txt", "link"),
        ("workspace/pipe", "fifo"),
        ("task.yaml", "link"),
    ],
)
def test_a_planted_link_fifo_or_device_in_a_suite_is_refused_at_load(
    authored: Path, where: str, kind: str
) -> None:
    target = authored / "roman-numerals" / where
    if target.exists():
        target.unlink()
    _plant(target, kind, "/etc/passwd")
    with pytest.raises(TaskError) as refused:
        load_suite(authored)
    message = str(refused.value)
    assert "\n" not in message and where.split("/")[-1] in message
    assert "root:" not in message  # nothing of the target, not even in a YAML error


def test_a_hidden_directory_that_is_a_link_is_refused(authored: Path, tmp_path: Path) -> None:
    hidden = authored / "roman-numerals" / "hidden"
    real = tmp_path / "elsewhere"
    hidden.rename(real)
    os.symlink(real, hidden, target_is_directory=True)
    with pytest.raises(TaskError, match="symbolic link"):
        load_suite(authored)


def test_links_planted_after_load_are_not_read_by_grading(authored: Path) -> None:
    """The grader re-reads ``hidden/`` and ``solution/`` when it grades: a link planted after the
    suite was loaded (a shared suite directory) is refused there too, never followed."""
    from tasks.collect import hidden_files
    from tasks.grading.pytest_workspace import pristine_members

    (task,) = load_suite(authored)
    os.symlink("/etc/passwd", task.hidden_dir / "test_zz.py")
    for read in (lambda: hidden_files(task.hidden_dir), lambda: pristine_members(task), task.hidden_files):
        with pytest.raises(TaskError, match="symbolic link"):
            read()
    os.unlink(task.hidden_dir / "test_zz.py")
    solution = next(p for p in (task.solution_dir).rglob("*.py"))
    solution.unlink()
    os.symlink("/etc/passwd", solution)
    with pytest.raises(TaskError, match="symbolic link"):
        task.solution_files()


def test_a_workspace_link_inside_the_tree_is_kept_as_a_link_never_read(authored: Path) -> None:
    """Real repositories hold relative links (``docs/README -> ../README``): they stay links in the
    archive the sandbox gets; nothing on the host is read through them."""
    workspace = authored / "roman-numerals" / "workspace"
    os.symlink("numerals/__init__.py", workspace / "alias.py")
    (task,) = load_suite(authored)
    with tarfile.open(fileobj=io.BytesIO(task.workspace_tar())) as tar:
        member = tar.getmember("alias.py")
    assert member.issym() and member.linkname == "numerals/__init__.py"
