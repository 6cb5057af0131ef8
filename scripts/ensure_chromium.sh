#!/usr/bin/env bash
# For the browser tests of the audit page: Debian's chromium and chromium-driver.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "rlguard: install chromium and chromedriver for the audit page tests" >&2
  exit 1
fi
echo "rlguard: installing chromium and chromium-driver from Debian's packages ..."
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
