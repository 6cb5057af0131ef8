"""Which language a file is written in, by its name: how code written to it is read later.

A file the call writes is scanned as code when its name says it will run (``x.py``, ``run.sh``,
a ``Makefile``, a ``.pth`` file Python executes at start-up, ``.bashrc``, a git hook) or when it
configures the test runner (``pytest.ini``, ``setup.cfg``, ``pyproject.toml``).
"""

from __future__ import annotations

import posixpath

_EXT_LANG = {
    ".py": "python",
    ".pyw": "python",
    ".pth": "pth",
    ".sh": "shell",
    ".bash": "shell",
    ".js": "node",
    ".mjs": "node",
    ".cjs": "node",
    ".ts": "node",
    ".pl": "perl",
    ".rb": "ruby",
    ".php": "php",
    ".awk": "awk",
    ".cfg": "config",
    ".ini": "config",
    ".toml": "config",
}
_SHELL_NAMES = frozenset({".bashrc", ".bash_profile", ".profile", ".zshrc", ".bash_login", ".envrc"})
_CONFIG_NAMES = frozenset({"pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "conftest.py"})


def lang_for_path(path: str) -> str | None:
    """The language of the file at ``path`` (``python``, ``shell``, ``make``, ``config``, ...), or None."""
    name = posixpath.basename(path)
    if name in _CONFIG_NAMES and not name.endswith(".py"):
        return "config"
    if name in _SHELL_NAMES or "/.git/hooks/" in path:
        return "shell"
    if name in ("Makefile", "makefile", "GNUmakefile") or name.endswith(".mk"):
        return "make"
    return _EXT_LANG.get(posixpath.splitext(name)[1].lower())
