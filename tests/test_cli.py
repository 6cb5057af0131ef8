"""The command line answers as an installed program would."""

import subprocess
import sys

from rlguard import __version__
from rlguard.settings import Settings


def test_version_prints_installed_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlguard", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"rlguard {__version__}"


def test_settings_read_prefixed_and_nested_environment(monkeypatch) -> None:
    monkeypatch.setenv("RLGUARD_DATABASE_URL", "sqlite:////tmp/x.db")
    monkeypatch.setenv("RLGUARD_SANDBOX__LIMITS__PIDS", "77")
    settings = Settings()
    assert settings.resolved_database_url == "sqlite:////tmp/x.db"
    assert settings.sandbox.limits.pids == 77
