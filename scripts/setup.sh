#!/bin/sh
# Creates .venv with piestream and its development tools on a fresh machine.
# Needs Python 3.11 and Java 17 (for Spark); installs Java with apt when running as root.
set -eu
PY=${PY:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
"$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' || {
  echo "piestream needs Python 3.11 ($PY is $("$PY" --version 2>&1))" >&2; exit 1; }
if ! command -v java >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Java not found: installing openjdk-17-jre-headless with apt-get" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "piestream needs Java 17 for Spark: install it (e.g. apt-get install openjdk-17-jre-headless)" >&2
    exit 1
  fi
fi
if ! command -v psql >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "psql not found: installing postgresql-client with apt-get (the server tests use it)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-client >/dev/null || true
fi
if ! command -v chromedriver >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "chromium not found: installing chromium and chromium-driver with apt-get (the dashboard test uses them)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null || true
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
