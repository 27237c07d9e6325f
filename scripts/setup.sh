#!/bin/sh
# Creates .venv with piestream and its development tools on a fresh machine, at exactly the
# versions of uv.lock (the versions CI last tested). Needs Python 3.11 and Java 17 (for Spark);
# installs Java and the test servers' packages with apt when running as root.
set -eu
PY=${PY:-python3.11}
EXTRAS=${EXTRAS:-dev}
command -v "$PY" >/dev/null 2>&1 || PY=python3
"$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' || {
  echo "piestream needs Python 3.11 ($PY is $("$PY" --version 2>&1))" >&2; exit 1; }
apt_install() {  # apt_install WHY PACKAGE...: only as root on Debian; a failure is reported, not fatal
  why=$1; shift
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing $* with apt-get ($why)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null || \
      echo "apt-get could not install $*" >&2
  fi
}
if ! command -v java >/dev/null 2>&1; then
  apt_install "Spark needs Java 17" openjdk-17-jre-headless
  command -v java >/dev/null 2>&1 || {
    echo "piestream needs Java 17 for Spark: install it (e.g. apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
fi
command -v psql >/dev/null 2>&1 || apt_install "the server tests use psql" postgresql-client
command -v chromedriver >/dev/null 2>&1 || apt_install "the dashboard test uses them" chromium chromium-driver
[ -x /usr/lib/postgresql/15/bin/initdb ] || apt_install "the postgres-cdc tests start a PostgreSQL 15" postgresql-15
command -v mariadb-install-db >/dev/null 2>&1 || apt_install "the mysql-cdc tests start a MariaDB" mariadb-server
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# uv first, hash-checked at the version uv.lock pins; then uv installs exactly the lock
"$PY" scripts/lock.py uv.lock > .venv/uv-requirement.txt
.venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r .venv/uv-requirement.txt
extras=""
for e in $EXTRAS; do extras="$extras --extra $e"; done
# --locked: refuse a uv.lock that no longer matches pyproject.toml (refresh it with `make lock`)
# shellcheck disable=SC2086
UV_PYTHON_DOWNLOADS=never .venv/bin/uv sync --locked --quiet $extras
