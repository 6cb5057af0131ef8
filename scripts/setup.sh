#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: .venv with rlguard installed (PyTorch pinned to the CPU
# wheel when there is no CUDA, installed first so no multi-GB CUDA build is pulled), a Docker engine
# that answers, and the sandbox image. Fast when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TORCH_CPU_PIN=${RLGUARD_TORCH_PIN:-torch==2.13.0}

if [ ! -x .venv/bin/python ]; then
  echo "rlguard: creating .venv ..."
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.rlguard-installed
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
      echo "rlguard: CUDA present; torch comes with the package."
    else
      echo "rlguard: installing $TORCH_CPU_PIN (CPU) ..."
      .venv/bin/pip install -q "$TORCH_CPU_PIN"
    fi
  fi
  echo "rlguard: installing rlguard and its dependencies into .venv ..."
  .venv/bin/pip install -q -e '.[test]'
  echo "$want" > "$stamp"
fi

bash scripts/ensure_docker.sh
# gVisor's runsc as a second wall, when asked for (docs/sandbox.md): installed and registered with
# the running engine (daemon.json + SIGHUP, no restart).
if [ "${RLGUARD_SANDBOX__RUNTIME:-runc}" = runsc ]; then
  bash scripts/ensure_runsc.sh
fi

# The sandbox image (built offline with debootstrap when no registry is usable; fast when present).
image="rlguard/sandbox-python:$(.venv/bin/rlguard --version | cut -d' ' -f2)"
if ! docker image inspect "$image" >/dev/null 2>&1 && ! command -v debootstrap >/dev/null 2>&1 \
  && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "rlguard: installing debootstrap for the offline image build ..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
.venv/bin/rlguard sandbox image ensure
