#!/bin/sh
# Checks the official npm `openai` SDK against the demo: starts
# `skywalker demo` on free ports, installs the SDK (npm, into a temporary
# directory) and runs scripts/npm-sdk-check.mjs against the us-east proxy:
# a background Responses request created, then retrieved to its end.
# Needs Node.js 18+ and npm; prints the SDK's version and what it saw.
# CI has only Go: the same exchange is held there by the Go SDK
# (go test ./internal/demo -run BackgroundResponseThroughTheDemo).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "npm-sdk-check: node and npm are needed (apt-get install nodejs npm)" >&2; exit 2; }
work=$(mktemp -d)
demo_pid=
cleanup() { [ -n "$demo_pid" ] && kill "$demo_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT INT TERM
version=${OPENAI_NPM_VERSION:-5.23.2}
echo "installing openai@$version from npm..."
(cd "$work" && npm install --silent --no-audit --no-fund "openai@$version" >/dev/null)
cp "$root/scripts/npm-sdk-check.mjs" "$work/"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 19000)
(cd "$root" && go build -o "$work/skywalker" ./cmd/skywalker)
"$work/skywalker" demo --ports "$port,0,0" --log-file "$work/demo.log" >"$work/demo.out" 2>&1 &
demo_pid=$!
tries=0
until curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1; do
	tries=$((tries + 1))
	[ $tries -gt 1800 ] && { echo "the demo's us-east proxy did not answer within 3 minutes (it opens after the demo's first phase); its output:" >&2; cat "$work/demo.out" >&2; exit 1; }
	sleep 0.1
done
cd "$work" && BASE_URL="http://127.0.0.1:$port/v1" MODEL=llama3-8b-demo node npm-sdk-check.mjs
