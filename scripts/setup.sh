#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine: system packages, then .venv.
# Safe to run every time: each step checks before it changes anything.
set -euo pipefail
cd "$(dirname "$0")/.."

# An uncommented bookworm-backports entry (either source format) under apt dir $1: once
# setup has written one, later runs leave the sources alone.
backports_configured() {
  grep -rqsE '^[^#]*bookworm-backports' "$1/sources.list" "$1/sources.list.d/"
}

need_apt=()
command -v valkey-server >/dev/null 2>&1 || command -v redis-server >/dev/null 2>&1 || need_apt+=(valkey-server)
# Sentinel (`proctor up --valkey sentinel`, the failover scenarios; issue #25): bookworm-backports, as valkey-server.
command -v valkey-sentinel >/dev/null 2>&1 || need_apt+=(valkey-sentinel)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
# PostgreSQL: the tests run the stack on both ledgers (SQLite by default, PostgreSQL via DATABASE_URL).
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || need_apt+=(postgresql)
# The browser test of report.html (tests/integration/test_report_browser.py; issue #27). Measured on
# this Debian 12 machine, loaded by other jobs: apt-get install -y chromium took 194 s (2026-12-01).
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# Log shipping (issue #26, docs/log-shipping.md): rsyslog (imfile, disk-assisted queues, impstats)
# and its RELP output (acknowledged delivery; plain TCP syslog loses what is in flight on a break).
[ -x /usr/sbin/rsyslogd ] || need_apt+=(rsyslog)
ls /usr/lib/*/rsyslog/omrelp.so >/dev/null 2>&1 || need_apt+=(rsyslog-relp)

# --python-only (make test-fast): only .venv; the servers are for integration tests and the demo.
if [ "${1:-}" = "--python-only" ]; then
  case " ${need_apt[*]} " in *" python3-venv "*) need_apt=(python3-venv) ;; *) need_apt=() ;; esac
fi

install_system_packages() {
  [ ${#need_apt[@]} -gt 0 ] || return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: missing system packages: ${need_apt[*]}" >&2
    echo "setup: on Debian 12 as root this script installs them; otherwise install valkey-server 8" >&2
    echo "       (Debian: apt-get install -t bookworm-backports valkey-server valkey-sentinel), haproxy, openssl," >&2
    echo "       postgresql (server binaries, for the tests) and python3-venv, then run it again." >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if [[ " ${need_apt[*]} " == *" valkey-"* ]] && ! apt-cache policy valkey-server 2>/dev/null | grep -q backports; then
    . /etc/os-release
    if [ "${VERSION_CODENAME:-}" = bookworm ] && ! backports_configured /etc/apt; then
      # Same mirror and keyring as the machine's own Debian source, never a hard-coded host.
      target=/etc/apt/sources.list.d/bookworm-backports.sources
      scripts/backports-source.sh /etc/apt bookworm > "$target.tmp" || {
        rm -f "$target.tmp"
        echo "setup: add bookworm-backports for your mirror yourself (see README, Troubleshooting)" >&2
        exit 1
      }
      mv "$target.tmp" "$target"
      echo "setup: wrote $target from the configured Debian source"
    fi
  fi
  echo "setup: apt-get install ${need_apt[*]}"
  apt-get update -qq
  # One transaction (each apt-get run reads the package database again); Valkey from backports when configured.
  local pkgs=() pkg
  for pkg in "${need_apt[@]}"; do
    if [ "$pkg" = valkey-server ] && backports_configured /etc/apt; then
      pkgs+=(valkey-server/bookworm-backports valkey-tools/bookworm-backports)
    elif [ "$pkg" = valkey-sentinel ] && backports_configured /etc/apt; then
      pkgs+=(valkey-sentinel/bookworm-backports)
    else
      pkgs+=("$pkg")
    fi
  done
  apt-get install -y -qq "${pkgs[@]}"
}

install_venv() {
  local stamp
  stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
  [ ! -f "$stamp" ] || return 0
  [ -x .venv/bin/python ] || python3 -m venv .venv
  echo "setup: pip install -e '.[dev]' into .venv (log: .venv/pip-install.log)"
  if ! { .venv/bin/python -m pip install -q --upgrade pip && .venv/bin/python -m pip install -q -e '.[dev]'; } \
      > .venv/pip-install.log 2>&1; then
    tail -40 .venv/pip-install.log >&2
    echo "setup: pip install failed; full log in .venv/pip-install.log" >&2
    exit 1
  fi
  rm -f .venv/.installed-*
  touch "$stamp"
}

# .venv needs no system package but python3-venv, so pip installs it while apt-get installs the servers
# (on a fresh machine about 30 s each, measured). Whatever happens, the script waits for pip before it
# ends: it never leaves a pip behind.
venv_job=
if [[ " ${need_apt[*]} " != *" python3-venv "* ]]; then
  install_venv &
  venv_job=$!
  trap '[ -z "$venv_job" ] || wait "$venv_job" || true' EXIT
fi
install_system_packages
if [ -n "$venv_job" ]; then
  wait "$venv_job" || exit 1  # install_venv said why
  venv_job=
else
  install_venv
fi

# The project's own modules are installed editable, so pip compiled no bytecode for them, and with
# PYTHONDONTWRITEBYTECODE=1 (CI) every process of every stack compiled them again from source: about
# 0.7 CPU s per stack start (docs/harness.md). Compiled once here; Python ignores a .pyc whose source
# has changed since, and this is quick when everything is up to date.
.venv/bin/python -m compileall -q -j 0 stack chaos loadtests >/dev/null
