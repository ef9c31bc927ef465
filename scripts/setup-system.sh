#!/usr/bin/env bash
# Debian packages the tests use as real engines (Chromium for the web chat's browser
# tests; more are added here as tests need them). Only missing ones are installed, and
# only as root with apt-get; otherwise the tests that need them skip, saying why.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# PostgreSQL server binaries (initdb, postgres) for the database store's tests; Debian
# keeps them off PATH under /usr/lib/postgresql/<major>/bin.
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null 2>&1 || need+=(postgresql)
# The load balancers docs/replicas.md configures, run in front of three replicas.
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v caddy >/dev/null 2>&1 || need+=(caddy)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "visus: missing ${need[*]} and cannot apt-get them; tests that need them will be skipped" >&2
  exit 0
fi
echo "visus: installing Debian packages for the tests: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
