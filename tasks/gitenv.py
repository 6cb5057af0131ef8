"""Git as the task builders run it: a fixed identity and clock, and no user or system configuration.

The same recipe then gives the same commit ids on every machine, and nothing of the host's git
configuration (hooks, templates, signing, credential prompts) reaches a task's repository.
"""

import os
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "rlguard",
    "GIT_AUTHOR_EMAIL": "tasks@rlguard.invalid",
    "GIT_COMMITTER_NAME": "rlguard",
    "GIT_COMMITTER_EMAIL": "tasks@rlguard.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
}


def git_env(home: str | Path) -> dict[str, str]:
    """The environment of one git command: :data:`GIT_ENV`, the caller's PATH and ``home`` as HOME."""
    return {**GIT_ENV, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
