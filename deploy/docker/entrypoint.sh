#!/bin/bash
# The opgate image's entrypoint: the first argument names the binary to run, the rest
# are its arguments, and the binary replaces this script (it is PID 1 and gets the
# signals): `docker run IMAGE intake --migrate`, `docker run IMAGE opgate migrate`.
#
# `healthcheck` (the image's HEALTHCHECK) asks the running service for /healthz on the
# port its listen variable names: intake INTAKE_LISTEN, executor
# EXECUTOR_METRICS_LISTEN, reconciler RECONCILER_METRICS_LISTEN, provider-sim
# PROVIDER_SIM_LISTEN (the image sets each to a fixed port). No curl in the image: bash
# speaks the one HTTP request itself.
set -euo pipefail

binaries="intake executor reconciler opgate provider-sim"

usage() {
  cat <<USAGE
usage: IMAGE BINARY [ARGS...]
  BINARY is one of: $binaries
  IMAGE BINARY --help lists its flags and environment variables.
USAGE
}

healthcheck() {
  local service listen port status
  service=$(basename "$(readlink /proc/1/exe)")
  case "$service" in
    intake) listen=${INTAKE_LISTEN:-} ;;
    executor) listen=${EXECUTOR_METRICS_LISTEN:-} ;;
    reconciler) listen=${RECONCILER_METRICS_LISTEN:-} ;;
    provider-sim) listen=${PROVIDER_SIM_LISTEN:-} ;;
    *) exit 0 ;; # opgate: a command that ends by itself, nothing to ask
  esac
  port=${listen##*:}
  if [ -z "$port" ] || [ "$port" = 0 ]; then
    echo "healthcheck: no fixed port for $service" >&2
    exit 1
  fi
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
  IFS=' ' read -r -t 5 _ status _ <&3 || status=
  [ "$status" = 200 ] || { echo "healthcheck: $service answered ${status:-nothing}" >&2; exit 1; }
}

name=${1:-}
case "$name" in
  intake | executor | reconciler | opgate | provider-sim)
    shift
    exec "/usr/local/bin/$name" "$@"
    ;;
  healthcheck) healthcheck ;;
  "" | help | -h | --help) usage ;;
  *)
    echo "unknown binary: $name" >&2
    usage >&2
    exit 64
    ;;
esac
