#!/usr/bin/env bash
# For the scale-out tests and `rlguard bench scale`: make sure a SECOND Docker engine runs on this
# machine, beside the main one, with its own data root, exec root (and so its own containerd), pid
# file and sockets, and holds the sandbox image. Prints its unix URL on stdout.
#
#   unix:///tmp/rlguard-dockerd2/docker.sock            plain, like the main engine's socket
#   tcp://127.0.0.1:23762 (TLS, client certificate)      ca.pem, cert.pem, key.pem in $ROOT/tls
#
# It never touches the main engine (/var/run/docker.sock) beyond reading the image from it with
# `docker save`. RLGUARD_ENGINE2_ROOT moves it (the socket path must stay under 100 characters);
# RLGUARD_ENGINE2_TLS_PORT moves the TLS port. Safe to run again: a running engine is left alone,
# an image already there is not loaded again; a killed engine (the fault tests SIGKILL it) is
# started again on the same data root.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=${RLGUARD_ENGINE2_ROOT:-/tmp/rlguard-dockerd2}
TLS_PORT=${RLGUARD_ENGINE2_TLS_PORT:-23762}
SOCK="$ROOT/docker.sock"
URL="unix://$SOCK"
TLS="$ROOT/tls"
log() { echo "rlguard: $*" >&2; }

answers() { timeout 10 docker -H "$URL" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

make_tls() {
  # A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate: the
  # engine then accepts only clients holding a certificate this CA signed (--tlsverify).
  [ -s "$TLS/key.pem" ] && [ -s "$TLS/server-key.pem" ] && return 0
  command -v openssl >/dev/null 2>&1 || { log "openssl is needed for the TLS listener"; return 1; }
  mkdir -p "$TLS"; chmod 700 "$TLS"
  (
    cd "$TLS"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=rlguard-engine2-ca" \
      -keyout ca-key.pem -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server-key.pem -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile server.ext -out server-cert.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=rlguard-client" -keyout key.pem -out client.csr 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile client.ext -out cert.pem 2>/dev/null
    rm -f server.csr client.csr server.ext client.ext
    chmod 600 ./*-key.pem key.pem
  )
}

start_engine() {
  command -v dockerd >/dev/null 2>&1 || { log "dockerd is not installed (scripts/ensure_docker.sh installs it)"; exit 1; }
  mkdir -p "$ROOT/data" "$ROOT/exec"
  make_tls
  # Its own daemon config (not /etc/docker/daemon.json): the gVisor runtime when it is installed.
  if [ -x /usr/bin/runsc ]; then
    echo '{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}}' >"$ROOT/daemon.json"
  else
    echo '{}' >"$ROOT/daemon.json"
  fi
  # A previous engine killed with SIGKILL leaves its managed containerd running: stop that one
  # (found through the pid file under this engine's own exec root, never by name).
  local cpid="$ROOT/exec/containerd/containerd.pid"
  if [ -s "$cpid" ] && kill -0 "$(cat "$cpid")" 2>/dev/null \
     && grep -q "$ROOT/exec" "/proc/$(cat "$cpid")/cmdline" 2>/dev/null; then
    local pid; pid=$(cat "$cpid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$SOCK" "$ROOT/docker.pid" "$cpid"
  log "starting a second dockerd (root $ROOT, log $ROOT/dockerd.log) ..."
  nohup dockerd \
    --config-file "$ROOT/daemon.json" \
    --data-root "$ROOT/data" --exec-root "$ROOT/exec" --pidfile "$ROOT/docker.pid" \
    -H "$URL" -H "tcp://127.0.0.1:$TLS_PORT" \
    --tlsverify --tlscacert "$TLS/ca.pem" --tlscert "$TLS/server-cert.pem" --tlskey "$TLS/server-key.pem" \
    --iptables=false --ip6tables=false --bridge=none --storage-driver=overlay2 \
    >>"$ROOT/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    answers && { log "second engine is up at $URL"; return 0; }
    sleep 0.5
  done
  log "the second dockerd did not answer within 60 s; see $ROOT/dockerd.log"
  tail -20 "$ROOT/dockerd.log" >&2 || true
  exit 1
}

answers || start_engine

# The images sandboxes use (the default one, and any named as arguments), copied from the main engine.
images=("$@")
if [ ${#images[@]} -eq 0 ]; then
  py=.venv/bin/python; [ -x "$py" ] || py=python3
  images=("$("$py" -c 'from sandbox.image import default_image; print(default_image())')")
fi
for image in "${images[@]}"; do
  if ! docker -H "$URL" image inspect "$image" >/dev/null 2>&1; then
    docker image inspect "$image" >/dev/null 2>&1 \
      || { log "image $image is not on the main engine either (rlguard sandbox image ensure)"; exit 1; }
    log "loading $image into the second engine ..."
    docker save "$image" | docker -H "$URL" load >/dev/null
  fi
done
echo "$URL"
