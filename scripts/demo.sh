#!/usr/bin/env bash
# The main job: all set-up, then ``rlguard demo`` on embedded defaults (SQLite, local Docker).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/rlguard demo "$@"
