#!/usr/bin/env bash
# Usage: scripts/compose-down.sh [--stop-engine]
#
# Stops the compose stack and removes its containers, network and volumes (project
# $PROCTOR_COMPOSE_PROJECT, default "proctor") and the run's secrets and roster ($PROCTOR_COMPOSE_RUN,
# default .compose/run: proctor.env, valkey-*.env, valkey-users.acl, faultproxy.env, roster/); the images stay as the build cache. With
# --stop-engine it also stops the dockerd that scripts/compose-setup.sh started (by the pid it
# kept), and only that one: an engine that was already running is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in  # before anything changes: an unknown option once took the stack down
  ''|--stop-engine) [ $# -le 1 ] || { echo "$(basename "$0"): one option at most (--stop-engine), got: $*" >&2; exit 2; } ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "$(basename "$0"): unknown option ${1} (usage: $(basename "$0") [--stop-engine])" >&2; exit 2 ;;
esac

STATE=.compose
PROJECT=${PROCTOR_COMPOSE_PROJECT:-proctor}
# PROCTOR_COMPOSE_VALKEY=sentinel: the Sentinel topology's overlay (docker-compose.sentinel.yml), unless
# COMPOSE_FILE already names the files (the harness does).
case "${PROCTOR_COMPOSE_VALKEY:-single}" in
  single) ;;
  sentinel) export COMPOSE_FILE=${COMPOSE_FILE:-docker-compose.yml:docker-compose.sentinel.yml} ;;
  *) echo "$(basename "$0"): PROCTOR_COMPOSE_VALKEY must be single or sentinel, not ${PROCTOR_COMPOSE_VALKEY}" >&2; exit 2 ;;
esac
RUN=${PROCTOR_COMPOSE_RUN:-$STATE/run}  # this deployment's secrets and roster
export PROCTOR_COMPOSE_RUN=$RUN

if docker info >/dev/null 2>&1; then
  env_args=()
  [ -f "$STATE/compose.env" ] && env_args=(--env-file "$STATE/compose.env")
  mkdir -p "$RUN"
  for f in proctor.env valkey-web.env valkey-relay.env valkey-worker.env valkey-harness.env; do
    [ -f "$RUN/$f" ] || install -m 600 /dev/null "$RUN/$f"  # compose insists on its env files existing
  done
  docker-compose -p "$PROJECT" "${env_args[@]}" down -v --remove-orphans --timeout 5
else
  echo "compose-down: no container engine answers; nothing to stop"
fi
# The run's secrets and roster end with it; the next set-up draws fresh ones.
rm -rf "$RUN/proctor.env" "$RUN"/valkey-*.env "$RUN/valkey-users.acl" "$RUN/faultproxy.env" "$RUN/roster"

if [ "${1:-}" = --stop-engine ] && [ -f "$STATE/dockerd.pid" ]; then
  pid=$(cat "$STATE/dockerd.pid")
  # Only our dockerd: the pid must still name a dockerd (a reused pid is someone else's process).
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
    kill "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    echo "compose-down: stopped dockerd (pid $pid)"
  fi
  rm -f "$STATE/dockerd.pid"
fi
