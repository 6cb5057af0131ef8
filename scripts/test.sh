#!/usr/bin/env bash
# The test command: all set-up, then lint and the whole test suite against real Docker (two
# engines), real PostgreSQL, real HTTP servers on loopback and headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The sandbox and red-team tests run under runc and gVisor's runsc (RLGUARD_TEST_RUNTIMES, default
# both): register runsc unless only runc is asked for.
case ",${RLGUARD_TEST_RUNTIMES:-runc,runsc}," in
  *,runsc,*) bash scripts/ensure_runsc.sh ;;
esac
bash scripts/ensure_chromium.sh
RLGUARD_TEST_POSTGRES_URL=$(bash scripts/ensure_postgres.sh)
export RLGUARD_TEST_POSTGRES_URL
# the scale-out tests: a second dockerd beside the main one (and, for ssh:// engines, a loopback sshd)
bash scripts/ensure_second_engine.sh >/dev/null
bash scripts/ensure_test_sshd.sh >/dev/null
.venv/bin/ruff check .
.venv/bin/lint-imports  # the layers of DESIGN.md (contracts in pyproject.toml)
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
