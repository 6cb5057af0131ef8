#!/usr/bin/env bash
# The test command: all set-up, then lint and the whole test suite against real Docker,
# real PostgreSQL, real HTTP servers on loopback and headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/ensure_chromium.sh
RLGUARD_TEST_POSTGRES_URL=$(bash scripts/ensure_postgres.sh)
export RLGUARD_TEST_POSTGRES_URL
.venv/bin/ruff check .
.venv/bin/lint-imports  # the layers of DESIGN.md (contracts in pyproject.toml)
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
