"""Suites by name: the built-in ones, and those built or imported into the state directory.

A suite is a directory of task directories, named by its directory's name. Built-in suites ship in
``tasks/suites/``. ``rlguard tasks build NAME`` writes ``STATE_DIR/tasks/suites/NAME`` and
``rlguard tasks import swebench --out DIR`` writes DIR wherever it is; both register the suite
here, so every command and the gateway find it by its name. The index is one small JSON file,
``STATE_DIR/tasks/suites.json`` (name -> directory); a suite directory under
``STATE_DIR/tasks/suites/`` is known without an entry (a suite built before the index existed).

A name resolves in this order: a built-in suite, a registered one, then a plain directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from tasks.errors import TaskError
from tasks.spec import _ID_RE, BUILTIN_SUITES_DIR, TASK_FILE

INDEX_FILE = Path("tasks") / "suites.json"
BUILT_SUITES_DIR = Path("tasks") / "suites"


def _holds_tasks(directory: Path) -> bool:
    return directory.is_dir() and any((child / TASK_FILE).is_file() for child in directory.iterdir())


class SuiteIndex:
    """The suites known in one state directory, by name."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / INDEX_FILE

    def built_dir(self, name: str) -> Path:
        """Where ``rlguard tasks build NAME`` writes the suite unless told otherwise."""
        return self.state_dir / BUILT_SUITES_DIR / name

    @staticmethod
    def builtin() -> dict[str, Path]:
        """The suites shipped with rlguard."""
        return {p.name: p for p in sorted(BUILTIN_SUITES_DIR.iterdir()) if _holds_tasks(p)}

    def registered(self) -> dict[str, Path]:
        """Suites built into the state directory, then those registered (a newer entry wins);
        directories that are gone are left out."""
        found: dict[str, Path] = {}
        built = self.state_dir / BUILT_SUITES_DIR
        if built.is_dir():
            found |= {p.name: p.resolve() for p in sorted(built.iterdir()) if _holds_tasks(p)}
        for name, directory in self._read().items():
            if Path(directory).is_dir():
                found[name] = Path(directory)
        builtin = self.builtin()
        return {name: path for name, path in sorted(found.items()) if name not in builtin}

    def known(self) -> dict[str, Path]:
        """Every suite a name reaches: built-in first, then registered."""
        return self.builtin() | self.registered()

    def all_dirs(self) -> list[Path]:
        """Every known suite's directory (what a gateway serves unless told otherwise)."""
        return list(self.known().values())

    def resolve(self, name_or_dir: str | Path) -> Path:
        """The directory of a suite given by name or as a directory; one TaskError naming the known
        suites otherwise."""
        text = str(name_or_dir)
        known = self.known()
        if text in known:
            return known[text]
        path = Path(text).expanduser()
        if path.is_dir():
            return path.resolve()
        names = ", ".join(known) or "none"
        raise TaskError(f"no suite {text!r}: not a known suite name ({names}) nor a directory")

    def check_name(self, directory: Path) -> str:
        """The name ``directory`` would be registered under; a TaskError when it cannot be."""
        name = Path(directory).resolve().name
        if not _ID_RE.match(name):
            raise TaskError(f"{directory}: a suite directory's name must match {_ID_RE.pattern}")
        if name in self.builtin():
            raise TaskError(
                f"{directory}: {name!r} is a built-in suite's name; choose another directory name"
            )
        return name

    def register(self, directory: Path) -> str:
        """Register the suite in ``directory`` under its directory name (replacing an entry of that
        name) and return the name."""
        directory = Path(directory).resolve()
        name = self.check_name(directory)
        if not _holds_tasks(directory):
            raise TaskError(f"{directory}: no task directories (each needs a {TASK_FILE})")
        with self._locked():
            entries = self._read()
            entries[name] = str(directory)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(dict(sorted(entries.items())), indent=2) + "\n")
            os.replace(tmp, self.path)
        return name

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise TaskError(f"cannot read the suite index {self.path}: {exc}") from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise TaskError(f"the suite index {self.path} is not a JSON object of name -> directory")
        return data

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
