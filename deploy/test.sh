#!/usr/bin/env bash
# Checks the deployment files:
#   - go test in this module: Dockerfile (BuildKit's parser), .dockerignore
#     (the server builds from the context it leaves), docker-compose.yml
#     (compose-go, and for real on podman: image built from the Dockerfile,
#     stack up, ports, healthcheck, a held key across restarts),
#     docker-compose.cluster.yml (compose-go, and for real on podman: three
#     nodes, a Go client session across podman kill of its node), the
#     Kubernetes manifests of the single node and of the cluster (kustomize
#     build, strict k8s.io/api decoding, the API's OpenAPI schemas), and the
#     real server: probes, /metrics, healthcheck, held keys across a restart;
#   - promtool: rules and config syntax, and the alert unit tests.
# Needs Go; deploy/ci-setup.sh installs promtool, podman, runc and
# podman-compose. A skipped check is listed at the end; with CI=true it
# fails the run. Exits non-zero when any step fails.
set -uo pipefail
cd "$(dirname "$0")"
# Where deploy/ci-setup.sh unpacks promtool and installs podman-compose.
export PATH="$PWD/../.ci/tools/venv/bin:$PWD/../.ci/tools/bin:$PATH"

passed=0
failed=0
failures=()

step() {
	local name=$1
	shift
	echo "=== deploy: $name"
	if "$@"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		failures+=("$name")
		echo "--- FAILED: $name"
	fi
}

gofmt_clean() {
	local out
	out=$(gofmt -l .)
	[ -z "$out" ] || { echo "gofmt needed: $out"; return 1; }
}

step "gofmt" gofmt_clean
step "go vet" go vet ./...
# -v through .ci/go-test: skips show with their reason, and fail under CI.
step "go test (Dockerfile, compose on podman, Kubernetes, server)" ../.ci/go-test -race -count=1 -timeout 20m ./...

if command -v promtool >/dev/null 2>&1; then
	step "promtool check rules" promtool check rules prometheus/alerts.yml
	step "promtool check config" promtool check config prometheus/prometheus.yml
	step "promtool test rules" promtool test rules prometheus/alerts_test.yml
elif [ "${CI:-}" = "true" ]; then
	echo "--- FAILED: promtool not found; run deploy/ci-setup.sh (unpacks it from Debian's prometheus package)"
	failed=$((failed + 1))
	failures+=("promtool missing")
else
	# Locally, like a client whose toolchain is missing: say so plainly and
	# go on; in CI (CI=true) a missing promtool fails the run.
	echo "!!!!!!!! SKIPPED: promtool not found, so the alert rules were not checked; run deploy/ci-setup.sh to install it"
	skipped=3
fi

echo
for f in "${failures[@]}"; do
	echo "deploy: FAILED $f"
done
echo "deploy: $passed passed, $failed failed${skipped:+, $skipped skipped}"
[ "$failed" -eq 0 ]
