#!/usr/bin/env bash
# The project's test command: formatting, vet, staticcheck, every test under
# the race detector, and the quickstart simulation. README.md and .ci/run
# both call exactly this. It needs only Go: staticcheck is installed from
# the Go module proxy on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2

unformatted=$(find . -name '*.go' -not -path './.git/*' -print0 | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
  echo "gofmt: these files need formatting:" >&2
  echo "$unformatted" >&2
  exit 1
fi

go vet ./...

staticcheck="$(go env GOPATH)/bin/staticcheck"
if ! "$staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  echo "installing staticcheck $STATICCHECK_VERSION ..." >&2
  go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
"$staticcheck" ./...

go test -race -count=1 ./...

# The Helm chart's tests are a module of their own, so that Helm and the
# Kubernetes API types stay out of the product's build.
(cd deploy/helm && go vet ./... && "$staticcheck" ./... && go test -count=1 ./...)

go run ./cmd/skywalker sim --scenario quickstart --quiet
