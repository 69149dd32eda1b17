# `make test` is the one command that runs every test of the project.
# `make run` starts the server in memory-only mode, like `go run .`.

GO       ?= go
FUZZTIME ?= 30s
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: test check go-test fuzz clients deploy-test bench build run

test: check go-test fuzz clients deploy-test
	@echo "make test: all green"

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o locking-center .
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o lc-cli ./cmd/lc-cli

run:
	$(GO) run .

# Formatting, vet, and generated templ code that must match its sources.
check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@# Run from the root with no -path: the generated files record paths relative to it.
	@$(GO) tool templ generate -check >/dev/null 2>&1 || { echo "templ output is stale: run 'go tool templ generate' and commit"; exit 1; }

go-test:
	$(GO) test -race -count=1 ./...

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./wire

clients:
	clients/run-tests

deploy-test:
	@if [ -x deploy/test.sh ]; then deploy/test.sh; fi

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./bench ./locker
