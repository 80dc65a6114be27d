#!/usr/bin/env bash
# Usage: scripts/compose-setup.sh [--up]
#
# Idempotent set-up of the containerized reference stack (docker-compose.yml) on Debian 12
# as root; each step runs only when it is needed and prints how long it took:
#   1. engine    apt-get install docker.io docker-compose iptables mmdebstrap (when missing)
#   2. dockerd   start it in the background when no engine answers (pid in .compose/dockerd.pid;
#                scripts/compose-stop-engine.sh stops it, and only that one)
#      cgroup    on cgroup v1 (cgroupfs driver), an engine this script started gets a CPU weight of
#                $PROCTOR_DOCKER_CPU_SHARES (default 16384) for its `docker` cgroup: otherwise every
#                container together weighs as much as one busy host process (docs/compose.md)
#   3. base      no registry: mmdebstrap a bookworm minbase from the machine's own apt source and
#                `docker import` it as proctor-base:bookworm (skipped when that image exists)
#   4. image     build proctor-stack:<source hash> from docker/Dockerfile with a wheelhouse built
#                on the host (skipped when the image for the current source hash exists)
#   5. secrets   per-run secrets into $PROCTOR_COMPOSE_RUN/proctor.env (default .compose/run; 0600,
#                git-ignored; kept while present: scripts/compose-down.sh removes it with the volumes)
# PROCTOR_COMPOSE_BUILD_NICE (0-19, default 0) runs the host's build steps (packages, base, wheelhouse)
# at that niceness; dockerd never (make test's set-up ahead of its compose pass uses 19, with the
# engine's containers at a CPU weight of 2 meanwhile, so the build takes only idle CPU).
# Then it writes .compose/compose.env (which image, which base) for `make compose-up`.
# With --up it also runs `docker-compose up -d --no-build` and waits for every health check.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in  # before anything changes: an unknown option once ran the whole set-up
  ''|--up) [ $# -le 1 ] || { echo "$(basename "$0"): one option at most (--up), got: $*" >&2; exit 2; } ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "$(basename "$0"): unknown option ${1} (usage: $(basename "$0") [--up])" >&2; exit 2 ;;
esac

STATE=.compose
BASE_IMAGE_LOCAL=proctor-base:bookworm
PROJECT=${PROCTOR_COMPOSE_PROJECT:-proctor}
# PROCTOR_COMPOSE_VALKEY=sentinel: the Sentinel topology's overlay (docker-compose.sentinel.yml), unless
# COMPOSE_FILE already names the files (the harness does).
case "${PROCTOR_COMPOSE_VALKEY:-single}" in
  single) ;;
  sentinel) export COMPOSE_FILE=${COMPOSE_FILE:-docker-compose.yml:docker-compose.sentinel.yml} ;;
  *) echo "$(basename "$0"): PROCTOR_COMPOSE_VALKEY must be single or sentinel, not ${PROCTOR_COMPOSE_VALKEY}" >&2; exit 2 ;;
esac
BUILD_NICE=${PROCTOR_COMPOSE_BUILD_NICE:-0}
case $BUILD_NICE in
  [0-9]|1[0-9]) ;;
  *) echo "$(basename "$0"): PROCTOR_COMPOSE_BUILD_NICE must be 0-19, not '${BUILD_NICE}'" >&2; exit 2 ;;
esac
build() { nice -n "$BUILD_NICE" "$@"; }  # a build step: at the asked niceness (dockerd is started without it)
RUN=${PROCTOR_COMPOSE_RUN:-$STATE/run}  # this deployment's secrets and roster
export PROCTOR_COMPOSE_RUN=$RUN
PY=${PYTHON:-.venv/bin/python}
export DOCKER_BUILDKIT=0  # the legacy builder: no buildx plugin needed, works with engine 20.10

mkdir -p "$STATE" "$RUN/roster" && chmod 700 "$STATE" "$RUN"

now() { date +%s.%N; }
took() { printf 'compose-setup: %-8s %6.1fs  %s\n' "$1" "$(echo "$(now) - $2" | bc)" "$3"; }
die() { echo "compose-setup: $*" >&2; exit 1; }

engine_answers() { docker info >/dev/null 2>&1; }

install_packages() {
  local need=() t0
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
  command -v iptables >/dev/null 2>&1 || need+=(iptables)
  command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
  [ ${#need[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    die "missing: ${need[*]}; install Docker (engine + Compose) yourself, or run this as root on Debian 12"
  fi
  t0=$(now)
  DEBIAN_FRONTEND=noninteractive build apt-get install -y -qq --no-install-recommends "${need[@]}" >"$STATE/apt.log" 2>&1 || {
    build apt-get update -qq && DEBIAN_FRONTEND=noninteractive build apt-get install -y -qq --no-install-recommends "${need[@]}" \
      >"$STATE/apt.log" 2>&1
  } || die "apt-get install ${need[*]} failed (log: $STATE/apt.log)"
  took engine "$t0" "installed ${need[*]}"
}

start_engine() {
  engine_answers && return 0
  command -v dockerd >/dev/null 2>&1 || die "no container engine answers and dockerd is not installed (apt-get install docker.io)"
  local t0 i
  t0=$(now)
  dockerd >"$STATE/dockerd.log" 2>&1 &
  echo $! >"$STATE/dockerd.pid"
  for i in $(seq 1 600); do  # polls the engine, gives up only if dockerd itself has died
    engine_answers && { took dockerd "$t0" "started (pid $(cat "$STATE/dockerd.pid"))"; return 0; }
    kill -0 "$(cat "$STATE/dockerd.pid")" 2>/dev/null || break
    sleep 0.2
  done
  die "dockerd did not come up (log: $STATE/dockerd.log)"
}

ENGINE_CPU_SHARES=${PROCTOR_DOCKER_CPU_SHARES:-16384}  # 16 containers x a nice-0 process's 1024

engine_is_ours() { [ -f "$STATE/dockerd.pid" ] && kill -0 "$(cat "$STATE/dockerd.pid")" 2>/dev/null; }

# cgroup v1 weighs the engine's parent cgroup, all containers together, like ONE task of the root
# cgroup (cpu.shares 1024): with a load of 15 on the host the whole stack got ~1/16 of the CPU and
# answers took 3-5 s (measured, docs/compose.md). Only an engine we started is changed: raising a
# user's engine would take CPU from their other work. cgroup v2 and the systemd driver weigh each
# container's own scope, so there is nothing to do there.
weigh_engine_cgroup() {
  local shares=/sys/fs/cgroup/cpu/docker/cpu.shares
  case $ENGINE_CPU_SHARES in ''|*[!0-9]*) die "PROCTOR_DOCKER_CPU_SHARES must be a whole number, not '$ENGINE_CPU_SHARES'";; esac
  [ "$(docker info --format '{{.CgroupVersion}} {{.CgroupDriver}}' 2>/dev/null)" = "1 cgroupfs" ] || return 0
  if ! engine_is_ours; then
    echo "compose-setup: cgroup   left the engine's cpu.shares as they are (not an engine this script started)"
    return 0
  fi
  mkdir -p "$(dirname "$shares")"  # the engine creates it at its first container; same cgroup either way
  [ "$(cat "$shares")" = "$ENGINE_CPU_SHARES" ] && return 0
  echo "$ENGINE_CPU_SHARES" >"$shares" || die "could not write $shares"
  echo "compose-setup: cgroup   engine's cpu.shares set to $ENGINE_CPU_SHARES (cgroup v1)"
}

# A deb822 file with bookworm, -updates, -backports (the machine's own mirror and keyring) and
# -security (the mirror's debian-security sibling), for mmdebstrap.
base_sources() {
  local stanza uri
  stanza=$(scripts/backports-source.sh /etc/apt bookworm) || die "no Debian bookworm apt source to build the base image from"
  printf '%s\n' "$stanza" | sed 's/^Suites: .*/Suites: bookworm bookworm-updates bookworm-backports/'
  uri=$(printf '%s\n' "$stanza" | sed -n 's/^URIs: //p')
  if [[ $uri == */debian ]]; then
    echo
    printf '%s\n' "$stanza" | sed -e "s#^URIs: .*#URIs: ${uri}-security#" -e 's/^Suites: .*/Suites: bookworm-security/'
  fi
}

build_base() {
  # A registry-reachable user builds FROM debian:bookworm-slim; we never try to pull.
  if [ -n "${PROCTOR_BASE_IMAGE:-}" ]; then
    docker image inspect "$PROCTOR_BASE_IMAGE" >/dev/null 2>&1 || die "PROCTOR_BASE_IMAGE=$PROCTOR_BASE_IMAGE is not a local image"
    BASE=$PROCTOR_BASE_IMAGE; return 0
  fi
  BASE=$BASE_IMAGE_LOCAL
  docker image inspect "$BASE" >/dev/null 2>&1 && return 0
  command -v mmdebstrap >/dev/null 2>&1 || die "no base image $BASE and mmdebstrap is missing (apt-get install mmdebstrap)"
  local t0 sources
  t0=$(now)
  sources=$(mktemp --suffix=.sources)
  base_sources >"$sources"
  build mmdebstrap --variant=minbase --components=main --quiet bookworm "$STATE/base.tar" "$sources" \
    >"$STATE/mmdebstrap.log" 2>&1 || { rm -f "$sources"; die "mmdebstrap failed (log: $STATE/mmdebstrap.log)"; }
  rm -f "$sources"
  build docker import "$STATE/base.tar" "$BASE" >/dev/null
  rm -f "$STATE/base.tar"
  took base "$t0" "$BASE ($(docker image inspect -f '{{.Size}}' "$BASE" | numfmt --to=iec))"
}

source_hash() {
  git ls-files -z -- docker pyproject.toml setup.py stack chaos | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12
}

build_wheelhouse() {
  # pip download judges dependency markers by the host's Python, even with --python-version:
  # redis needs async-timeout on the image's Python 3.11.2 (python_full_version < "3.11.3"),
  # which the download misses; so it is named here (tried: the image build then fails on it).
  local req="$STATE/requirements.txt" arch
  arch=$(uname -m)
  "$PY" - >"$req" <<'EOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]  # the image runs the stack on PostgreSQL: proctor[stack,postgres]
print("\n".join([*project["dependencies"], *extras["stack"], *extras["postgres"], "async-timeout>=4.0.3",
                 "setuptools>=68", "wheel"]))
EOF
  build "$PY" -m pip download -q --dest "$STATE/wheels" --only-binary=:all: --implementation cp --python-version 3.11.2 \
    --abi cp311 --abi abi3 --abi none --platform "manylinux_2_28_$arch" --platform "manylinux_2_17_$arch" \
    --platform "manylinux2014_$arch" --platform "manylinux1_$arch" --platform any -r "$req" \
    >"$STATE/pip-download.log" 2>&1 || die "pip download of the wheelhouse failed (log: $STATE/pip-download.log)"
}

build_image() {
  if [ -n "${PROCTOR_IMAGE:-}" ]; then  # an image of your own (or one built before): used as it is
    docker image inspect "$PROCTOR_IMAGE" >/dev/null 2>&1 || die "PROCTOR_IMAGE=$PROCTOR_IMAGE is not a local image"
    IMAGE=$PROCTOR_IMAGE; return 0
  fi
  IMAGE=proctor-stack:$(source_hash)
  docker image inspect "$IMAGE" >/dev/null 2>&1 && return 0
  local t0
  t0=$(now)
  rm -rf "$STATE/wheels"
  build_wheelhouse
  build docker build -q -f docker/Dockerfile --build-arg "BASE_IMAGE=$BASE" --build-arg WHEELHOUSE=.compose/wheels \
    -t "$IMAGE" . >"$STATE/build.log" 2>&1 || die "docker build of $IMAGE failed (log: $STATE/build.log)"
  took image "$t0" "$IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec))"
}

write_secrets() {
  # a complete set (older runs had no ACL file, nor the Sentinels' credentials)
  [ -s "$RUN/proctor.env" ] && [ -s "$RUN/valkey-users.acl" ] && [ -s "$RUN/valkey-sentinel.env" ] && return 0
  "$PY" -m stack.deploy.provision env-file "$RUN/proctor.env"
}

# Every long-running container of the project healthy; fails at once on one that is unhealthy or exited
# with an error (no deadline of its own: a slow machine is slow, a broken service says so).
wait_healthy() {
  local states bad
  while true; do
    states=$(docker ps -a --filter "label=com.docker.compose.project=$PROJECT" --format '{{.Names}} {{.Status}}')
    [ -n "$states" ] || die "no container of project $PROJECT"
    bad=$(grep -E 'unhealthy|Exited \([1-9]|Restarting|Dead' <<<"$states" || true)
    [ -z "$bad" ] || die "not healthy: $bad (docker-compose -p $PROJECT logs)"
    grep -vE '\(healthy\)|Exited \(0\)' <<<"$states" >/dev/null || return 0
    sleep 0.5
  done
}

install_packages
start_engine
weigh_engine_cgroup
build_base
build_image
write_secrets
# Written aside and renamed: the compose pass's workers run this for their projects at the same time, and
# a reader must never find the file empty.
printf 'PROCTOR_IMAGE=%s\nPROCTOR_BASE_IMAGE=%s\n' "$IMAGE" "$BASE" >"$STATE/compose.env.$$"
mv -f "$STATE/compose.env.$$" "$STATE/compose.env"

if [ "${1:-}" = --up ]; then
  t0=$(now)
  docker-compose -p "$PROJECT" --env-file "$STATE/compose.env" up -d --no-build >"$RUN/up.log" 2>&1 \
    || die "docker-compose up failed (log: $RUN/up.log; docker-compose -p $PROJECT logs for more)"
  wait_healthy
  took up "$t0" "every service healthy; API on http://127.0.0.1:${PROCTOR_HTTP_PORT:-8080}"
fi
