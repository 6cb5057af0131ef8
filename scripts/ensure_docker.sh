#!/usr/bin/env bash
# Make sure a Docker engine answers. Use DOCKER_HOST or the default socket if one does; else, as
# root on Debian/Ubuntu, install docker.io and start dockerd in the background; else say what to do.
set -euo pipefail

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_answers; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "rlguard: no Docker engine answers (DOCKER_HOST=${DOCKER_HOST:-unset})." >&2
  echo "Install Docker (https://docs.docker.com/engine/install/) and start it, or set DOCKER_HOST." >&2
  exit 1
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "rlguard: installing docker.io from Debian's packages ..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
if [ -n "${DOCKER_HOST:-}" ] && [ "${DOCKER_HOST}" != "unix:///var/run/docker.sock" ]; then
  echo "rlguard: DOCKER_HOST=${DOCKER_HOST} does not answer; unset it to use a local engine." >&2
  exit 1
fi
echo "rlguard: starting dockerd in the background (log: /var/log/rlguard-dockerd.log) ..."
nohup dockerd --iptables=false --ip6tables=false --bridge=none >/var/log/rlguard-dockerd.log 2>&1 &
for _ in $(seq 1 120); do
  if engine_answers; then
    echo "rlguard: Docker engine is up."
    exit 0
  fi
  sleep 0.5
done
echo "rlguard: dockerd did not answer within 60 s; see /var/log/rlguard-dockerd.log" >&2
tail -20 /var/log/rlguard-dockerd.log >&2 || true
exit 1
