#!/usr/bin/env bash
# For the ssh:// engine test: an sshd of the tests' own on 127.0.0.1 (key login only), from
# Debian's openssh-server package unpacked under $ROOT (not installed: no service starts; only the
# privilege-separation user `sshd` and /run/sshd are added, as the package would), and a `ssh`
# wrapper that uses this sshd's key and known host.
# Prints the directory to put first on PATH (its `ssh` speaks to this sshd), then the engine URL
# (ssh://root@127.0.0.1:PORT: `docker system dial-stdio` there reaches the main engine).
set -euo pipefail

ROOT=${RLGUARD_TEST_SSHD_ROOT:-/tmp/rlguard-sshd}
PORT=${RLGUARD_TEST_SSHD_PORT:-23763}
log() { echo "rlguard: $*" >&2; }

mkdir -p "$ROOT/pkg" "$ROOT/bin"
chmod 700 "$ROOT"
SSHD="$ROOT/root/usr/sbin/sshd"
LIBS="$ROOT/root/usr/lib/x86_64-linux-gnu:$ROOT/root/lib/x86_64-linux-gnu"
if [ ! -x "$SSHD" ]; then
  command -v apt-get >/dev/null 2>&1 || { log "apt-get is needed to fetch openssh-server"; exit 1; }
  (cd "$ROOT/pkg" && apt-get download -qq openssh-server libwrap0 2>/dev/null) \
    || { apt-get update -qq >&2 && (cd "$ROOT/pkg" && apt-get download -qq openssh-server libwrap0); }
  for deb in "$ROOT"/pkg/*.deb; do dpkg -x "$deb" "$ROOT/root"; done
fi
command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1 \
  || { log "the ssh client (openssh-client) is needed"; exit 1; }

[ -s "$ROOT/host_key" ] || ssh-keygen -q -t ed25519 -N "" -f "$ROOT/host_key"
[ -s "$ROOT/client_key" ] || ssh-keygen -q -t ed25519 -N "" -f "$ROOT/client_key"
cp "$ROOT/client_key.pub" "$ROOT/authorized_keys"
echo "[127.0.0.1]:$PORT $(cat "$ROOT/host_key.pub")" >"$ROOT/known_hosts"
cat >"$ROOT/sshd_config" <<EOF
Port $PORT
ListenAddress 127.0.0.1
HostKey $ROOT/host_key
PidFile $ROOT/sshd.pid
AuthorizedKeysFile $ROOT/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
EOF
cat >"$ROOT/ssh_config" <<EOF
Host 127.0.0.1
  IdentityFile $ROOT/client_key
  UserKnownHostsFile $ROOT/known_hosts
  StrictHostKeyChecking yes
  IdentitiesOnly yes
EOF
REAL_SSH=$(command -v ssh)
printf '#!/bin/sh\nexec %s -F %s "$@"\n' "$REAL_SSH" "$ROOT/ssh_config" >"$ROOT/bin/ssh"
chmod 755 "$ROOT/bin/ssh"

answers() { timeout 10 "$ROOT/bin/ssh" -p "$PORT" -o BatchMode=yes root@127.0.0.1 true >/dev/null 2>&1; }
if ! answers; then
  # what installing the package would add: the privilege-separation user and directory
  getent passwd sshd >/dev/null 2>&1 \
    || useradd --system --no-create-home --home-dir /run/sshd --shell /usr/sbin/nologin sshd
  mkdir -p /run/sshd
  if [ -s "$ROOT/sshd.pid" ] && kill -0 "$(cat "$ROOT/sshd.pid")" 2>/dev/null; then
    kill "$(cat "$ROOT/sshd.pid")" || true
    sleep 0.5
  fi
  LD_LIBRARY_PATH="$LIBS" "$SSHD" -f "$ROOT/sshd_config" -E "$ROOT/sshd.log"
  for _ in $(seq 1 50); do answers && break; sleep 0.2; done
  answers || { log "the test sshd did not answer; see $ROOT/sshd.log"; tail -5 "$ROOT/sshd.log" >&2; exit 1; }
fi
echo "$ROOT/bin"
echo "ssh://root@127.0.0.1:$PORT"
