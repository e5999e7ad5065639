#!/usr/bin/env bash
# The project's test command: formatting, tidy modules, vet, staticcheck, every test under
# the race detector, and the quickstart simulation. README.md and .ci/run
# both call exactly this. It needs only Go: staticcheck is installed from
# the Go module proxy on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says what it does and how long it took: on a fresh machine the
# first steps download the modules and compile everything (minutes with
# no other output), and go test prints each package as it finishes.
began=$SECONDS
step() { printf '==> %s (at %ds)\n' "$1" $((SECONDS - began)) >&2; }

STATICCHECK_VERSION=v0.8.2

step "gofmt"
unformatted=$(find . -name '*.go' -not -path './.git/*' -print0 | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
  echo "gofmt: these files need formatting:" >&2
  echo "$unformatted" >&2
  exit 1
fi

step "go mod tidy (go.mod and go.sum say exactly what the code imports)"
if ! go mod tidy -diff; then
  echo "go.mod or go.sum is not tidy: run go mod tidy" >&2
  exit 1
fi
(cd deploy/helm && go mod tidy -diff) || { echo "deploy/helm: go.mod or go.sum is not tidy: run go mod tidy there" >&2; exit 1; }

step "go vet (on a fresh machine: downloads the modules and compiles everything, a few minutes)"
go vet ./...

staticcheck="$(go env GOPATH)/bin/staticcheck"
if ! "$staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  echo "installing staticcheck $STATICCHECK_VERSION ..." >&2
  go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
step "staticcheck"
"$staticcheck" ./...

step "go test -race ./... (each package is printed as it finishes; the proxy's and the CLI's take the longest)"
go test -race -count=1 ./...

# The Helm chart's tests are a module of their own, so that Helm and the
# Kubernetes API types stay out of the product's build.
step "the Helm chart's tests"
(cd deploy/helm && go vet ./... && "$staticcheck" ./... && go test -count=1 ./...)

step "the quickstart simulation"
go run ./cmd/skywalker sim --scenario quickstart --quiet
step "all passed"

