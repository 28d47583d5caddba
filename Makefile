# obsops — one Makefile for the whole workspace. See README.md.
SHELL := /bin/bash
BINARIES := gateway authtoken transfer catalog ingest site
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
MODULES = $(shell go list -m -f '{{.Dir}}')

.PHONY: build generate up up-sites wan-down wan-up wan-slow down logs compose-secrets test lint bench chaos screenshots clean

build: ## build every binary into ./bin
	@mkdir -p bin
	@for s in $(BINARIES); do (cd services/$$s && go build -trimpath -ldflags '$(LDFLAGS)' -o ../../bin/$$s ./cmd/$$s) || exit 1; done
	@cd migrations && go build -trimpath -ldflags '$(LDFLAGS)' -o ../bin/migrate ./cmd/migrate
	@cd deploy/devidp && go build -trimpath -ldflags '$(LDFLAGS)' -o ../../bin/devidp .
	@cd deploy/wan && go build -trimpath -ldflags '$(LDFLAGS)' -o ../../bin/wan .
	@cd cli && go build -trimpath -ldflags '$(LDFLAGS)' -o ../bin/obsops ./cmd/obsops

generate: build ## refresh client/openapi.json from the gateway of a test stack (PostgreSQL at OPS_TEST_DATABASE_URL) and regenerate the typed client (client/api) with the pinned oapi-codegen
	@cd cli && OBSOPS_GENERATE=1 OPS_BIN_DIR=$(CURDIR)/bin go test -count=1 -run 'TestCLI/OpenAPISnapshotIsCurrent' .
	@cd cli && go run ./internal/gen/generate

up: ## start PostgreSQL, Redis and the whole suite; gateway on http://127.0.0.1:8080 (installs PostgreSQL + q3c, Redis, curl and python3 with apt-get when missing)
	@deploy/local/stack.sh up

up-sites: ## `make up` (main site, gateway :8080) plus the WAN and a secondary site (gateway :8180); see docs/two-sites.md
	@deploy/local/stack.sh up-sites

wan-down: ## cut the WAN between the sites (connections dropped, new ones refused)
	@deploy/local/stack.sh wan-down

wan-up: ## restore the WAN and clear its latency/loss
	@deploy/local/stack.sh wan-up

wan-slow: ## add latency (300 ms) and loss (5% of connections) to the WAN
	@deploy/local/stack.sh wan-slow

down: ## stop everything `make up` / `make up-sites` started (both sites)
	@deploy/local/stack.sh down

logs: ## follow the services' logs
	@deploy/local/stack.sh logs

compose-secrets: ## make the passwords deploy/compose.yaml reads, once, into the git-ignored deploy/secrets/ (existing ones are kept); run before `docker compose -f deploy/compose.yaml up`
	@sh deploy/compose-secrets.sh

test: ## every module's tests against a local PostgreSQL and real binaries (starts what it needs; also installs promtool and chromium); lists every skip and ends with "N passed, N failed, N skipped"
	@deploy/local/stack.sh test

lint: ## gofmt, go vet, and every module building on its own (GOWORK=off, as the container build does)
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@go vet $(addsuffix /...,$(MODULES))
	@for m in $(MODULES); do (cd $$m && GOWORK=off go build -o /dev/null ./...) || { echo "$$m does not build with GOWORK=off"; exit 1; }; done

screenshots: ## regenerate the web console's screenshots in docs/ (docs/console.md) with the headless-browser test
	@deploy/local/stack.sh screenshots

bench: ## benchmarks with ratios measured in the same run
	@deploy/local/stack.sh bench

chaos: ## long fault tests of the ingest buffer (about 27 minutes; see docs/operations.md, "Fault tests")
	@deploy/local/stack.sh chaos

clean: ## remove ./bin
	rm -rf bin
