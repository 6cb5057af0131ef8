#!/bin/sh
# Shared by the Dockerfile and the offline builder, so both images hold the same things that matter:
# user `agent` (uid 1000) with no password, /workspace owned by it, no setuid/setgid binaries (no
# way back to root even if no-new-privileges were off), and no docs, locales or apt lists.
# Usage: rootfs-setup.sh ROOT   (ROOT is / inside a Dockerfile, the debootstrap directory offline)
set -eu
root=${1:?usage: rootfs-setup.sh ROOT}

if ! grep -q '^agent:' "$root/etc/passwd"; then
  echo 'agent:x:1000:1000:rlguard agent:/tmp:/bin/bash' >>"$root/etc/passwd"
  echo 'agent:x:1000:' >>"$root/etc/group"
  echo 'agent:!:19000:0:99999:7:::' >>"$root/etc/shadow"
fi
mkdir -p "$root/workspace"
chown 1000:1000 "$root/workspace"
chmod 0755 "$root/workspace"

# No privilege escalation through the filesystem: strip every setuid/setgid bit.
find "$root" -xdev -type f \( -perm -4000 -o -perm -2000 \) -exec chmod ug-s {} +

# Small image: drop documentation, translations, apt state and caches.
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
  "$root"/usr/share/locale/* "$root"/usr/share/lintian "$root"/var/lib/apt/lists/* \
  "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old "$root"/var/log/* "$root"/tmp/* \
  "$root"/var/tmp/*
find "$root/usr/lib" -name '__pycache__' -type d -prune -exec rm -rf {} +

# Byte-compile Python's standard library and pytest once, here: the root filesystem is read-only at
# run time, so without these files every agent or grader `pytest` would compile its imports from
# source (measured ~5x slower start). A few test-data files in the stdlib do not compile on purpose.
chroot "$root" /usr/bin/python3 -m compileall -q /usr/lib/python3 /usr/lib/python3.11 >/dev/null 2>&1 || true
