#!/usr/bin/env bash
# The project's test command: formatting, vet, and every test under the race
# detector. README.md and .ci/run both call exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(find . -name '*.go' -not -path './.git/*' -print0 | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
  echo "gofmt: these files need formatting:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
go test -race -count=1 -p 1 ./...   # -p 1: the real-time tests (engine pacing, the proxy mesh) must not share the CPU with the simulator tests
go run ./cmd/skywalker sim --scenario quickstart --quiet
