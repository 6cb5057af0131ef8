"""A small SWE-bench-format dataset from a real PyPI project, shipped so tests and
``rlguard bench grading`` run offline: ``inflection`` 0.5.1 (MIT; its sdist's package, setup files
and its own 455-test ``test_inflection.py``, unmodified, in ``tasks/data/``).

``build_rows(root)`` makes what an importer gets from SWE-bench: a local clone at
``<root>/repos/inflection__inflection`` (the sdist as the first commit, then one commit per
instance that injects a bug, as a regression would) and ``<root>/rows.jsonl``. The gold ``patch`` of
an instance undoes its bug; its ``test_patch`` adds a regression test; FAIL_TO_PASS and PASS_TO_PASS
are computed by running plain pytest (``--junitxml``) over the base and the fixed tree on the host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tasks.errors import TaskError
from tasks.gitenv import git_env
from tasks.grading.baseline import junit_outcomes

DATA = Path(__file__).resolve().parent / "data" / "inflection-0.5.1"
REPO = "inflection/inflection"


@dataclass(frozen=True)
class Instance:
    """One injected bug: ``old`` becomes ``new`` in ``file``; ``regression_test`` is the test patch."""

    number: int
    statement: str
    file: str
    old: str
    new: str
    regression_test: str


INSTANCES = (
    Instance(
        1,
        "`inflection.parameterize` keeps a separator at the start and the end of its result: "
        "`parameterize('  Donald E. Knuth  ')` gives '-donald-e-knuth-' instead of 'donald-e-knuth'.",
        "inflection/__init__.py",
        "        string = re.sub(r\"(?i)^{sep}|{sep}$\".format(sep=re_sep), '', string)\n",
        "",
        "\n\ndef test_parameterize_strips_separators_at_both_ends():\n"
        "    assert inflection.parameterize('  Donald E. Knuth  ') == 'donald-e-knuth'\n",
    ),
    Instance(
        2,
        "`inflection.underscore` no longer turns dashes into underscores: `underscore('foo-bar')` "
        "gives 'foo-bar' instead of 'foo_bar'.",
        "inflection/__init__.py",
        '    word = word.replace("-", "_")\n',
        "",
        "\n\ndef test_underscore_replaces_dashes():\n"
        "    assert inflection.underscore('foo-bar') == 'foo_bar'\n",
    ),
)


def _git(cwd: Path, *args: str) -> str:
    env = git_env(cwd)
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise TaskError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def _host_pytest(tree: Path) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "--rootdir",
                str(tree),
                "-o",
                "junit_family=xunit1",
                f"--junitxml={xml}",
                "test_inflection.py",
            ],
            cwd=tree,
            capture_output=True,
            timeout=300,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        if not xml.is_file():
            raise TaskError(f"plain pytest wrote no report in {tree}")
        return junit_outcomes(xml.read_text())


def build_rows(root: Path) -> tuple[Path, Path]:
    """Write the clone and the rows under ``root``; returns ``(rows.jsonl, repos dir)``."""
    repos = root / "repos"
    clone = repos / REPO.replace("/", "__")
    if clone.exists():
        shutil.rmtree(clone)
    shutil.copytree(DATA, clone)
    _git(clone, "init", "-q", "-b", "main")
    _git(clone, "add", "-A")
    _git(clone, "commit", "-q", "-m", "inflection 0.5.1 (sdist)")
    release = _git(clone, "rev-parse", "HEAD").strip()
    rows = []
    for instance in INSTANCES:
        _git(clone, "checkout", "-q", "-b", f"regression-{instance.number}", release)
        target = clone / instance.file
        text = target.read_text()
        if instance.old not in text:
            raise TaskError(f"instance {instance.number}: the bug's anchor is not in {instance.file}")
        target.write_text(text.replace(instance.old, instance.new, 1))
        _git(clone, "commit", "-q", "-am", f"regression {instance.number}")
        base = _git(clone, "rev-parse", "HEAD").strip()
        gold = _git(clone, "diff", base, release, "--", instance.file)
        with (clone / "test_inflection.py").open("a") as fh:
            fh.write(instance.regression_test)
        test_patch = _git(clone, "diff")
        before = _host_pytest(clone)
        target.write_text(text)
        after = _host_pytest(clone)
        _git(clone, "checkout", "-q", "--", ".")
        fail_to_pass = sorted(n for n, o in after.items() if o == "passed" and before.get(n) != "passed")
        pass_to_pass = sorted(n for n, o in after.items() if o == "passed" and before.get(n) == "passed")
        rows.append(
            {
                "instance_id": f"inflection__inflection-{instance.number}",
                "repo": REPO,
                "base_commit": base,
                "patch": gold,
                "test_patch": test_patch,
                "problem_statement": instance.statement,
                "FAIL_TO_PASS": json.dumps(fail_to_pass),
                "PASS_TO_PASS": json.dumps(pass_to_pass),
                "version": "0.5",
                "environment_setup_commit": release,
            }
        )
    _git(clone, "checkout", "-q", "main")
    rows_path = root / "rows.jsonl"
    rows_path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows_path, repos
