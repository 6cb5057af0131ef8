#!/usr/bin/env bash
# Make sure the Docker engine knows gVisor's runtime `runsc` (RLGUARD_SANDBOX__RUNTIME=runsc).
# Idempotent and fast when done. As root on Debian/Ubuntu: installs the `runsc` package if missing,
# writes {"runtimes": {"runsc": {"path": ..., "runtimeArgs": ["--network=none"]}}} into
# /etc/docker/daemon.json (other keys kept) and sends SIGHUP to dockerd, which reloads its runtimes
# without a restart (running containers are not touched). `--network=none`: rlguard's containers
# have no network anyway, and runsc's own network stack refuses Docker's `none` network otherwise.
# Elsewhere it says what to do. Exit 0 only when `docker info` lists runsc.
set -euo pipefail

DAEMON_JSON=${RLGUARD_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}

runsc_registered() { timeout 10 docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }

entry_written() {
  [ -f "$DAEMON_JSON" ] && python3 -c 'import json,sys; r=json.load(open(sys.argv[1])).get("runtimes",{}).get("runsc",{}); sys.exit(0 if r.get("runtimeArgs")==["--network=none"] else 1)' "$DAEMON_JSON" 2>/dev/null
}

if runsc_registered && { [ "$(id -u)" != 0 ] || entry_written; }; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "rlguard: the Docker engine has no 'runsc' runtime; as root run scripts/ensure_runsc.sh," >&2
  echo "or install gVisor (https://gvisor.dev/docs/user_guide/install/) and register it." >&2
  exit 1
fi
if ! command -v runsc >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "rlguard: runsc is not installed and there is no apt-get; install gVisor by hand." >&2
    exit 1
  fi
  echo "rlguard: installing runsc (gVisor) from the distribution's packages ..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null
fi
runsc_path=$(command -v runsc)
mkdir -p "$(dirname "$DAEMON_JSON")"
python3 - "$DAEMON_JSON" "$runsc_path" <<'EOF'
import json, os, sys

path, runsc = sys.argv[1], sys.argv[2]
try:
    with open(path) as fh:
        config = json.load(fh)
except FileNotFoundError:
    config = {}
if not isinstance(config, dict):
    sys.exit(f"rlguard: {path} is not a JSON object; add the runsc runtime by hand")
config.setdefault("runtimes", {})["runsc"] = {"path": runsc, "runtimeArgs": ["--network=none"]}
tmp = f"{path}.rlguard-{os.getpid()}"
with open(tmp, "w") as fh:
    json.dump(config, fh, indent=2)
    fh.write("\n")
os.replace(tmp, path)
EOF
pid=$(pidof dockerd || true)
if [ -z "$pid" ]; then
  echo "rlguard: no dockerd process to reload; start it (scripts/ensure_docker.sh) and run this again." >&2
  exit 1
fi
echo "rlguard: registering runsc with dockerd (SIGHUP, no restart) ..."
kill -HUP $pid
for _ in $(seq 1 40); do
  if runsc_registered && entry_written; then
    echo "rlguard: runsc is registered."
    exit 0
  fi
  sleep 0.25
done
echo "rlguard: dockerd did not list runsc after a reload; see its log" >&2
exit 1
