# policyflow: `make` lists the targets. Every target documented with `## `
# shows up in `make help`.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

GO ?= go

# Modules with unit tests, and every module (gofmt, go vet).
UNIT_MODULES := events schemas topology services tools
MODULES := $(UNIT_MODULES) integration

# Per-package limit of `go test`; generous because the machines that run the
# suites can be slow and busy.
TEST_TIMEOUT ?= 30m

# Stages are the services/<stage>/ directories whose main.go is a main
# package (services/runtime/main.go is not), so new stages build without
# editing this file.
STAGES := $(patsubst services/%/main.go,%,$(shell grep -l '^package main$$' services/*/main.go 2>/dev/null))
# Commands under tools/ (policyctl, devbroker, simulators), found the same way.
TOOLS := $(patsubst tools/%/main.go,%,$(shell grep -l '^package main$$' tools/*/main.go 2>/dev/null))

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GO_BUILD := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X main.version=$(VERSION)'

# Consul: built once from the wrapper module tools/consul, cached per version
# outside the checkout so that another clone on the same machine reuses it.
CONSUL_VERSION := $(shell awk '$$1 == "github.com/hashicorp/consul" { print $$2; exit }' tools/consul/go.mod)
CONSUL_BIN := .cache/bin/consul
CONSUL_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/policyflow/consul-$(CONSUL_VERSION)

.PHONY: help consul browser promtool compose build run test test-external bench bench-go capsim fuzz lint images clean

help: ## list the targets
	@echo 'Usage: make <target> [ARGS=...]'
	@echo
	@awk 'BEGIN { FS = ":[^#]*## " } /^[a-zA-Z_-]+:[^#]*## / { printf "  %-8s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

consul: $(CONSUL_BIN) ## build the Consul agent into .cache/bin/consul (first time 5-10 min; reused after)
	@if [ ! -x '$(CONSUL_CACHE)' ]; then \
		mkdir -p '$(dir $(CONSUL_CACHE))'; \
		cp $(CONSUL_BIN) '$(CONSUL_CACHE).tmp' && mv '$(CONSUL_CACHE).tmp' '$(CONSUL_CACHE)'; \
		echo 'consul: cached a copy at $(CONSUL_CACHE) for other clones'; \
	fi

$(CONSUL_BIN): tools/consul/go.mod
	@mkdir -p $(@D)
	@if [ -x '$(CONSUL_CACHE)' ]; then \
		echo 'consul: reusing $(CONSUL_CACHE)'; \
		cp '$(CONSUL_CACHE)' $@.tmp; \
	else \
		echo 'consul: building Consul $(CONSUL_VERSION) from tools/consul (the first build takes 5 to 10 minutes)'; \
		(cd tools/consul && GOWORK=off CGO_ENABLED=0 GONOSUMDB=github.com/hashicorp/consul-awsauth \
			GOFLAGS=-mod=mod $(GO) build -trimpath -buildvcs=false -o $(abspath $@).tmp github.com/hashicorp/consul); \
	fi
	@mv $@.tmp $@
	@$(abspath $@) version | sed -n 1p

# The status page's browser test (integration/policyflow TestOperatorView)
# drives Debian's chromium headless; on a machine without it, this installs
# it from Debian's package registry (as root, or with sudo).
browser: ## install Debian's chromium for the status page's browser test, when it is missing
	@if command -v chromium >/dev/null 2>&1; then \
		chromium --version 2>/dev/null | sed -n 1p; \
	else \
		echo 'browser: installing chromium (Debian package) for the status page test'; \
		sudo=''; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium >/dev/null; \
		chromium --version 2>/dev/null | sed -n 1p; \
	fi

# The alert rules' test (integration/deploy TestAlertRules) runs promtool
# against deploy/prometheus/*_test.yaml; on a machine without it, this
# installs Debian's prometheus package, which holds it (as root, or with sudo).
promtool: ## install Debian's prometheus (for promtool) for the alert rules' test, when promtool is missing
	@if command -v promtool >/dev/null 2>&1; then \
		promtool --version 2>&1 | sed -n 1p; \
	else \
		echo 'promtool: installing prometheus (Debian package) for the alert rules test'; \
		sudo=''; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq prometheus >/dev/null; \
		promtool --version 2>&1 | sed -n 1p; \
	fi

# The compose test (integration/deploy TestComposeFileRuns, containers
# backend) brings deploy/compose.yaml up with `docker compose` or, where that
# plugin is missing, Debian's docker-compose, installed here when neither runs.
compose: ## install Debian's docker-compose for the compose test, when no Compose CLI runs
	@if docker compose version >/dev/null 2>&1; then \
		docker compose version | sed -n 1p; \
	elif command -v docker-compose >/dev/null 2>&1; then \
		docker-compose version | sed -n 1p; \
	else \
		echo 'compose: installing docker-compose (Debian package) for the compose test'; \
		sudo=''; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq docker-compose >/dev/null; \
		docker-compose version | sed -n 1p; \
	fi

build: ## build policyctl, devbroker, the other tools and every stage into bin/ (static, CGO_ENABLED=0)
	@mkdir -p bin
	cd tools && $(GO_BUILD) -o ../bin/ $(addprefix ./,$(TOOLS))
ifneq ($(strip $(STAGES)),)
	cd services && $(GO_BUILD) -o ../bin/ $(addprefix ./,$(STAGES))
endif
	@echo "built into bin/: $$(ls bin | tr '\n' ' ')"

# `make run` loads the demo (sample components and policies, an update landing
# in Consul and in a component's script); ARGS= runs the bare stack.
ARGS ?= --demo

run: build consul ## run the whole pipeline on this machine with the demo (bin/policyctl dev, flags in ARGS="..."); state in .data/
	bin/policyctl dev $(ARGS)

# `make test` also runs every fuzz target for TEST_FUZZTIME after the unit
# tests (which already ran each target's seed corpus): about a minute in all.
TEST_FUZZTIME ?= 3s

test: consul browser promtool ## unit tests of every module, every fuzz target for TEST_FUZZTIME (3s), then integration on the embedded backend (and containers when Docker works)
	@for m in $(UNIT_MODULES); do \
		echo "==> unit tests: $$m"; \
		(cd $$m && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...); \
	done
	@$(MAKE) fuzz FUZZTIME=$(TEST_FUZZTIME)
	@echo '==> integration: PF_BACKEND=embedded'
	@cd integration && PF_BACKEND=embedded PF_REQUIRE_BROWSER=1 PF_REQUIRE_PROMTOOL=1 $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	@if docker info >/dev/null 2>&1; then \
		$(MAKE) compose; \
		echo '==> images of the containers backend and of the compose test (deploy/compose.yaml runs every one)'; \
		sh deploy/build-images.sh; \
		echo '==> integration: PF_BACKEND=containers'; \
		(cd integration && PF_BACKEND=containers TESTCONTAINERS_RYUK_DISABLED=true \
			$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...); \
		echo 'integration backends run: embedded, containers'; \
	else \
		echo 'integration backends run: embedded only (docker info failed, so the containers backend was skipped)'; \
	fi

# `make test-external` runs every integration suite, and the chaos faults
# that stop neither the broker nor Consul, against a Kafka cluster and a
# Consul already running, named by the variables the stages read:
# PF_BROKERS, PF_SASL_MECHANISM/USER/PASSWORD, PF_TLS, PF_TLS_CA,
# PF_CONSUL_ADDR, PF_CONSUL_TOKEN. Each test keeps to its own topic prefix
# and group names and removes them afterwards (PF_EXTERNAL_KEEP=1 keeps
# them). deploy/QUALIFICATION.md says how to point it at Apache Kafka,
# Redpanda or a managed Kafka and what each suite proves. EXTERNAL_ARGS=
# passes go test flags, e.g. EXTERNAL_ARGS="-run TestSmoke ./smoke/".
EXTERNAL_ARGS ?= ./...

test-external: ## run the integration suites and the chaos faults that stop neither broker nor Consul against the cluster PF_BROKERS, PF_SASL_*, PF_TLS*, PF_CONSUL_ADDR and PF_CONSUL_TOKEN name (deploy/QUALIFICATION.md)
	@if [ -z "$${PF_BROKERS:-}" ] || [ -z "$${PF_CONSUL_ADDR:-$${CONSUL_HTTP_ADDR:-}}" ]; then \
		echo 'test-external: set PF_BROKERS (the seed brokers) and PF_CONSUL_ADDR (a Consul agent); see deploy/QUALIFICATION.md' >&2; exit 2; \
	fi
	@echo "==> integration: PF_BACKEND=external against $${PF_BROKERS} and Consul $${PF_CONSUL_ADDR:-$${CONSUL_HTTP_ADDR:-}}"
	@cd integration && PF_BACKEND=external $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(EXTERNAL_ARGS)

# `make bench` measures the stages against ceilings measured in the same run
# (bin/pfbench: table on stdout, JSON report in .bench/); BENCH_ARGS="..."
# passes flags (bin/pfbench --help). `make bench-go` runs the Go benchmarks
# of the hot pure code.
BENCH_ARGS ?=

bench: build consul ## measure every stage against ceilings of the same run, its scaling over 1 and 2 group members, placement checks and proposals, the pipeline end to end, node management with 100,000 simulated nodes, and the matcher and executor simulated at 10k and 100k components (reports in .bench/; flags in BENCH_ARGS="...")
	bin/pfbench $(BENCH_ARGS)
	@mkdir -p .bench
	bin/fleetsim --json .bench/fleetsim-$$(date -u +%Y%m%dT%H%M%SZ).json
	bin/capsim --components 10000,100000 --partitions 6 --consul-components 10000 --json .bench/capsim-$$(date -u +%Y%m%dT%H%M%SZ).json

# `make capsim` simulates the matcher and the executor at 100,000 and
# 1,000,000 components over 6 and 24 partitions in one process (under
# 5 GiB), and writes one Consul shard of 10,000 and one of 50,000
# components to a Consul server of its own (under 2 GiB): the inputs of
# docs/capacity.md. CAPSIM_ARGS="..." passes flags (bin/capsim --help).
CAPSIM_ARGS ?= --components 100000,1000000 --partitions 6,24 --consul-components 10000,50000

capsim: build consul ## simulate the matcher's and executor's state and decisions at 100k and 1M components, and Consul shards of 10k and 50k (docs/capacity.md; flags in CAPSIM_ARGS="...")
	@mkdir -p .bench
	bin/capsim $(CAPSIM_ARGS) --json .bench/capsim-$$(date -u +%Y%m%dT%H%M%SZ).json

bench-go: ## run the Go benchmarks: Avro encode/decode of every event, matching against 100k filters, segmenting 10 MB, directives of 100k nodes, placement checks on 10,000 leaves and proposals
	cd events && $(GO) test -run '^$$' -bench . -benchmem ./...
	cd services && $(GO) test -run '^$$' -bench . -benchmem ./...

# `make chaos` runs the fault matrix (bin/pfchaos): every stage and the
# North API as processes, killed one by one mid-stream, the broker
# restarted, the faults of a three-broker cluster (leaders re-elected,
# coordinators moved mid-transaction, a rolling restart, a burst of
# retriable errors), Consul stopped for a while, a rebalance storm; it prints
# lost / duplicated / backwards / recovery time per fault and fails when a
# count is not 0. CHAOS_ARGS="..." passes flags (bin/pfchaos --help), e.g.
# CHAOS_ARGS="--faults consul-down --consul-down 10s".
# With Docker, the images of the containers faults (a Consul cluster, the
# consul-writer in a container) are built first, tagged CHAOS_IMAGE_TAG.
CHAOS_ARGS ?=
CHAOS_IMAGE_TAG ?= dev

chaos: build consul ## run the fault matrix: stages killed mid-stream, broker restart, Consul down 30s, rebalance storm, and with Docker a Consul cluster losing its leader and a stage cut off its network; fails on any lost, duplicated or backwards update (flags in CHAOS_ARGS="...")
	@if docker info >/dev/null 2>&1; then \
		PF_IMAGE_TAG=$(CHAOS_IMAGE_TAG) sh deploy/build-images.sh consul consul-writer; \
	else \
		echo 'chaos: docker info failed, so the containers faults will be reported as not run'; \
	fi
	bin/pfchaos --consul-image policyflow/consul:$(CHAOS_IMAGE_TAG) --stage-images 'policyflow/%s:$(CHAOS_IMAGE_TAG)' $(CHAOS_ARGS)

# `make fuzz` runs every Go fuzz target of the repository, one after another
# (`go test -fuzz` takes one target per run), each for FUZZTIME. The targets
# are the `func Fuzz...(f *testing.F)` of the test files, found with sed
# (asking `go test -list` would build every package once more). A failing
# input is saved under the package's testdata/fuzz/<target>/ and fails the
# run: commit it with its fix, it is a regression test from then on.
FUZZTIME ?= 60s

fuzz: ## run every Go fuzz target for FUZZTIME each (default 60s); failures land in testdata/fuzz/
	@dirs=$$({ grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' $(MODULES) || true; } | xargs -r -n1 dirname | sort -u); \
	if [ -z "$$dirs" ]; then echo 'fuzz: no fuzz targets found' >&2; exit 1; fi; \
	for d in $$dirs; do \
		list=$$(sed -n -E 's/^func (Fuzz[A-Za-z0-9_]*)\([A-Za-z0-9_]+ \*testing\.F\).*/\1/p' $$d/*_test.go); \
		for t in $$list; do \
			echo "==> fuzz: $$d $$t for $(FUZZTIME)"; \
			out=$$(mktemp); \
			if ! (cd $$d && $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) .) 2>&1 | tee $$out; then \
				if grep -q 'context deadline exceeded' $$out && [ -z "$$(git status --porcelain -- $$d/testdata/fuzz/$$t 2>/dev/null)" ]; then \
					echo "fuzz: $$t: go's fuzzing engine stopped on its own time limit with no failing input found or saved; counted as passed"; \
				else rm -f $$out; exit 1; fi; \
			fi; \
			rm -f $$out; \
		done; \
	done

lint: ## fail on files gofmt would change, then go vet every module
	@unformatted=$$(gofmt -l $(MODULES)); \
	if [ -n "$$unformatted" ]; then echo 'gofmt would change these files (run gofmt -w):'; echo "$$unformatted"; exit 1; fi
	@for m in $(MODULES); do \
		echo "==> go vet: $$m"; \
		(cd $$m && $(GO) vet ./...); \
	done

images: ## build the local container images FROM scratch (deploy/build-images.sh)
	@if [ ! -f deploy/build-images.sh ]; then echo 'images: deploy/build-images.sh is missing; nothing can build the images' >&2; exit 1; fi
	sh deploy/build-images.sh

clean: ## remove bin/ and the dev stack's state in .data/ (keeps the Consul build in .cache/)
	rm -rf bin .data
