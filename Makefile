# `make test` is the one command that runs every test of the project. On a
# fresh machine it first installs what the tests need and the machine lacks
# (`make setup`, idempotent and quick when everything is there), then runs
# everything. A skipped check is printed loudly; with CI=true it fails the run.
# `make run` starts the server in memory-only mode, like `go run .`.

GO       ?= go
FUZZTIME ?= 30s
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# promtool is unpacked into .ci/tools/bin by deploy/ci-setup.sh, and the
# Python tools (pytest, podman-compose, ziglang) live in the project's venv
# .ci/tools/venv (.ci/python-venv): nothing is installed into the machine's
# Python. The tests find them on PATH; the venv's python3 comes first.
export PATH := $(CURDIR)/.ci/tools/venv/bin:$(CURDIR)/.ci/tools/bin:$(PATH)

# Tests that `go test ./...` skips on purpose, and where they run instead:
# the Go client's conformance suite needs a server (clients/run-tests starts
# one); the million-key memory test takes minutes under -race (go-test runs
# it again without -race); TestHelper* are not tests but the child processes
# of other tests, which start them with their own -test.run.
SKIP_IN_RACE_RUN := ^(TestConformance.*|TestMillionKeysLeaveNoTrace|TestHelper.*)$$

.PHONY: test setup check go-test fuzz clients deploy-test bench bench-compare build run soak cluster-soak

test: setup check go-test fuzz clients deploy-test
	@echo "make test: all green"

# Installs what is missing: chromium, promtool, podman and podman-compose,
# each client's toolchain. Needs root (apt-get) only when something is missing.
setup:
	@.ci/setup

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o locking-center .
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o lc-cli ./cmd/lc-cli

run:
	$(GO) run .

# Formatting, vet, and generated templ code that must match its sources.
check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd client && $(GO) vet ./...
	cd bench/compare && $(GO) vet ./...
	@# Run from the root with no -path: the generated files record paths relative to it.
	@$(GO) tool templ generate -check >/dev/null 2>&1 || { echo "templ output is stale: run 'go tool templ generate' and commit"; exit 1; }

# -v through .ci/go-test, so that every skip shows with its reason (and fails
# under CI) and the real-browser dashboard test is seen to run.
go-test:
	.ci/go-test -race -count=1 -skip '$(SKIP_IN_RACE_RUN)' ./...
	cd client && ../.ci/go-test -race -count=1 -skip '$(SKIP_IN_RACE_RUN)' ./...
	.ci/go-test -count=1 -run '^TestMillionKeysLeaveNoTrace$$' ./locker
	@# bench-compare's own module: its statistics, drivers and report (no peer needed).
	cd bench/compare && ../../.ci/go-test -count=1 ./...

fuzz:
	cd client && $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./protocol
	cd client && $(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime $(FUZZTIME) ./protocol
	@# A count, not a time: a time-bounded run of FuzzReplay can stall at its end.
	$(GO) test -run '^$$' -fuzz '^FuzzReplay$$' -fuzztime 20000x ./walog

clients:
	clients/run-tests

deploy-test:
	deploy/test.sh

# 1,000 SIGKILL cycles of the real server under load (the failpoint build,
# each named crash point hit at least 100 times, every cycle's history
# checked), then a minute of load on one server checked for leaks. See
# docs/reliability.md.
soak:
	LC_LOAD_CYCLES=1000 LC_FAILPOINT_MIN_HITS=100 LC_LEAK_DURATION=60s \
		$(GO) test -count=1 -timeout 60m -run '^(TestCrashRestartUnderLoad|TestNoLeaksAfterLoad)$$' -v ./walog/crashtest

# The cluster's fault harness (cluster/faulttest, root: network namespaces)
# with CLUSTER_FAULT_RUNS runs of every fault (default 100), ending with the
# table of counts per fault. make test runs it with 2 runs of each. See
# docs/reliability.md. Two test processes run at once, each on networks of
# its own (the faults of processes on three nodes; the rest), to halve the
# time; each log in .soak/ ends with its tables, which are printed.
CLUSTER_FAULT_RUNS ?= 100
cluster-soak:
	mkdir -p .soak && $(GO) test -c -o .soak/faulttest.test ./cluster/faulttest
	cd cluster/faulttest && \
	export LC_CLUSTER_FAULT_RUNS=$(CLUSTER_FAULT_RUNS); \
	../../.soak/faulttest.test -test.count=1 -test.timeout 600m -test.v \
		-test.run '^TestClusterFaults3$$' > ../../.soak/log-1.log 2>&1 & one=$$!; \
	../../.soak/faulttest.test -test.count=1 -test.timeout 600m -test.v \
		-test.run '^TestClusterFaults(3Net|5)$$' > ../../.soak/log-2.log 2>&1 & two=$$!; \
	wait $$one; a=$$?; wait $$two; b=$$?; \
	for f in ../../.soak/log-1.log ../../.soak/log-2.log; do echo "== $$f"; \
		awk '/ runs +ops /{p=1} /^(---|ok|FAIL|PASS)/{print; next} p && !/ run [0-9]+ \(/' $$f; done; \
	test $$a -eq 0 && test $$b -eq 0

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./bench ./locker

# Locking-Center beside Redis, etcd and PostgreSQL (installed with apt-get when
# missing), in its own Go module; writes docs/bench/. See bench/compare.
bench-compare:
	cd bench/compare && $(GO) run . -out ../../docs/bench
