#!/usr/bin/env bash
# The project's test command: formatting, tidy modules, vet, staticcheck, every test under
# the race detector, the Helm chart's tests and the quickstart simulation. README.md and
# .ci/run both call exactly this. It needs only Go: staticcheck is installed from
# the Go module proxy on first use.
#
# Every step runs, even after one fails; the failures are listed at the end
# and the exit status is 1 if there were any. The tests run package by
# package, two at a time (the slowest first), and each package is printed
# with its time as it finishes, not in path order.
set -uo pipefail
cd "$(dirname "$0")/.."

began=$SECONDS
failed=()
step() { printf '==> %s (at %ds)\n' "$1" $((SECONDS - began)) >&2; }
fail() { failed+=("$1"); printf '!!! FAILED: %s\n' "$1" >&2; }

STATICCHECK_VERSION=v0.8.2

step "gofmt"
unformatted=$(find . -name '*.go' -not -path './.git/*' -print0 | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
  echo "gofmt: these files need formatting:" >&2
  echo "$unformatted" >&2
  fail "gofmt"
fi

step "go mod tidy (go.mod and go.sum say exactly what the code imports)"
go mod tidy -diff || { echo "go.mod or go.sum is not tidy: run go mod tidy" >&2; fail "go mod tidy"; }
(cd deploy/helm && go mod tidy -diff) || { echo "deploy/helm: go.mod or go.sum is not tidy: run go mod tidy there" >&2; fail "go mod tidy (deploy/helm)"; }

step "go vet (on a fresh machine: downloads the modules and compiles everything, a few minutes)"
go vet ./... || fail "go vet"

staticcheck="$(go env GOPATH)/bin/staticcheck"
if ! "$staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  echo "installing staticcheck $STATICCHECK_VERSION ..." >&2
  go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" || fail "installing staticcheck"
fi
step "staticcheck"
"$staticcheck" ./... || fail "staticcheck"

# The slowest packages start first, so that two workers finish together.
slow=(./cmd/skywalker ./internal/proxy ./internal/plan ./internal/eval ./internal/demo ./internal/sim ./internal/mesh)
packages=$( { printf '%s\n' "${slow[@]}"; go list -f '{{if or .TestGoFiles .XTestGoFiles}}./{{.ImportPath}}{{end}}' ./... | sed 's#^\./skywalker#.#'; } | awk '!seen[$0]++')
workers=${SKYWALKER_TEST_WORKERS:-2}
logs=$(mktemp -d)
step "go test -race, package by package ($workers at a time; each printed as it finishes, with its time)"
# test1 runs one package's tests and prints one line for it; its output is
# kept in $logs and shown in full only if it failed.
test1() {
  local pkg=$1 logs=$2 start=$SECONDS log
  log="$logs/$(echo "$pkg" | tr '/.' '__').log"
  if go test -race -count=1 "$pkg" >"$log" 2>&1; then
    printf 'ok    %-32s %4ds\n' "$pkg" $((SECONDS - start))
  else
    printf 'FAIL  %-32s %4ds\n' "$pkg" $((SECONDS - start))
    echo "$pkg" >"$log.failed"
  fi
}
export -f test1
printf '%s\n' $packages | xargs -P "$workers" -I{} bash -c 'test1 "$1" "$2"' _ {} "$logs"
for f in "$logs"/*.failed; do
  [ -e "$f" ] || continue
  pkg=$(cat "$f")
  echo "--- output of $pkg, which failed:" >&2
  cat "${f%.failed}" >&2
  fail "go test -race $pkg"
done
rm -rf "$logs"

# The Helm chart's tests are a module of their own, so that Helm and the
# Kubernetes API types stay out of the product's build.
step "the Helm chart's tests"
(cd deploy/helm && go vet ./... && "$staticcheck" ./... && go test -count=1 ./...) || fail "the Helm chart's tests"

step "the quickstart simulation"
go run ./cmd/skywalker sim --scenario quickstart --quiet || fail "the quickstart simulation"

if ((${#failed[@]})); then
  step "${#failed[@]} step(s) failed:"
  printf '  - %s\n' "${failed[@]}" >&2
  exit 1
fi
step "all passed"
