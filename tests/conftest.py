"""Fixtures shared by every test area: the real PostgreSQL server and the Docker engine."""

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# A shared 2-core CI machine can be slow to generate examples; that is no failure of the code under
# test. Deadlines are off for the same reason (timing belongs in benchmarks, not tests).
settings.register_profile(
    "rlguard", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
settings.load_profile("rlguard")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A real PostgreSQL server on loopback (``scripts/ensure_postgres.sh`` installs and starts it)."""
    url = os.environ.get("RLGUARD_TEST_POSTGRES_URL")
    if not url:
        url = subprocess.run(
            ["bash", str(REPO / "scripts" / "ensure_postgres.sh")], capture_output=True, text=True, check=True
        ).stdout.strip()
        os.environ["RLGUARD_TEST_POSTGRES_URL"] = url
    return url
