#!/usr/bin/env bash
# What SkyWalker adds in front of an instant engine, beside nginx and
# HAProxy, in one table (README "Measurements: the proxy"). Installs
# nginx, HAProxy and wrk from the distribution when they are missing,
# then runs `skywalker bench gateway` with the arguments given, e.g.
#   scripts/gateway-bench.sh --duration 10s --sustain 60s
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v nginx >/dev/null || missing+=(nginx-light)
command -v haproxy >/dev/null || missing+=(haproxy)
command -v wrk >/dev/null || missing+=(wrk)
if ((${#missing[@]})); then
	echo "installing ${missing[*]} ..." >&2
	if [ "$(id -u)" = 0 ]; then
		apt-get install -y "${missing[@]}" >/dev/null || { apt-get update >/dev/null && apt-get install -y "${missing[@]}" >/dev/null; } || echo "could not install ${missing[*]}: those columns are left out" >&2
	else
		sudo apt-get install -y "${missing[@]}" >/dev/null || echo "could not install ${missing[*]}: those columns are left out" >&2
	fi
fi
go build -o "${TMPDIR:-/tmp}/skywalker-gateway-bench" ./cmd/skywalker
exec "${TMPDIR:-/tmp}/skywalker-gateway-bench" bench gateway "$@"
