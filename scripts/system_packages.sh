#!/usr/bin/env bash
# Debian packages the tests use: chromium for the explorer's browser tests. PostgreSQL is
# installed by scripts/services.sh. Skips what is already there; needs root and apt-get.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
  echo "system_packages.sh: cannot install ${need[*]} (no apt-get or not root); those tests will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
