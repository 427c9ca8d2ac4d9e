# entityflow: `make run` starts everything locally, `make test` runs every test.
# Tools are built from the Go module proxy into ./bin, pinned here.

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
TEMPORAL_CLI_VERSION := v1.5.1
WORKFLOWCHECK_VERSION := v0.6.0
BENCHSTAT_VERSION := v0.0.0-20260908200009-22c9c6c9d4da
STATICCHECK_VERSION := v0.8.2
ERRCHECK_VERSION := v1.30.0
# The bus ingress needs streams without a duplicate window (nats-server 2.14+).
NATS_SERVER_VERSION := v2.15.2
# Prometheus 3.x (its Go module's v0.3xx tags): promtool checks and unit-tests
# the rules of deploy/prometheus; prometheus evaluates them under make run.
PROMETHEUS_VERSION := v0.316.0
BENCH_COUNT ?= 6
FUZZTIME ?= 30s
# FuzzAPI starts a dev server and the API on SQLite and PostgreSQL in its one
# worker; gathering the coverage of its ~600 seeds takes about 40 s of it.
API_FUZZTIME ?= 2m

TEMPORAL := $(BIN)/temporal
WORKFLOWCHECK := $(BIN)/workflowcheck
BENCHSTAT := $(BIN)/benchstat
STATICCHECK := $(BIN)/staticcheck
ERRCHECK := $(BIN)/errcheck
NATS_SERVER := $(BIN)/nats-server
JAEGER := $(BIN)/jaeger
PROMTOOL := $(BIN)/promtool
PROMETHEUS := $(BIN)/prometheus
TS_CLIENT_MODULES := clients/ts/node_modules/.package-lock.json

.PHONY: all tools cluster-tools build run run-cluster lint test test-all test-suites test-real-server test-jaeger test-typescript test-short bench fuzz histories clean

all: lint test

tools: $(TEMPORAL) $(WORKFLOWCHECK) $(BENCHSTAT) $(STATICCHECK) $(ERRCHECK) $(NATS_SERVER) cluster-tools $(JAEGER) $(PROMTOOL) $(PROMETHEUS) $(TS_CLIENT_MODULES)

# The TypeScript client's packages (clients/ts, pinned by its package-lock.json),
# for its tests against the running API (internal/tests/integration/api).
$(TS_CLIENT_MODULES): clients/ts/package-lock.json
	npm ci --prefix clients/ts --no-audit --no-fund

# The Temporal CLI embeds the dev server and its Web UI. The first build takes a
# few minutes and about 2 GB of memory; later builds reuse the Go build cache.
$(TEMPORAL):
	@echo "building the Temporal CLI $(TEMPORAL_CLI_VERSION) into bin/ (first time: a few minutes)"
	GOBIN=$(BIN) $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

$(WORKFLOWCHECK):
	GOBIN=$(BIN) $(GO) install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

$(BENCHSTAT):
	GOBIN=$(BIN) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(ERRCHECK):
	GOBIN=$(BIN) $(GO) install github.com/kisielk/errcheck@$(ERRCHECK_VERSION)

# The NATS server of the ingress's tests and of make run (JetStream).
$(NATS_SERVER):
	GOBIN=$(BIN) $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION)

# promtool: `promtool check rules` and `promtool test rules` on
# deploy/prometheus (its Go tests). prometheus: the Prometheus make run starts
# on 127.0.0.1:9091 with those rules when bin/prometheus exists. The module
# proxy carries Prometheus's Go code but not its web UI's compiled assets:
# the HTTP API (/api/v1/alerts, /api/v1/query) serves, the UI pages do not.
$(PROMTOOL):
	@echo "building promtool $(PROMETHEUS_VERSION) into bin/ (first time: a few minutes)"
	GOBIN=$(BIN) $(GO) install github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_VERSION)

$(PROMETHEUS):
	@echo "building prometheus $(PROMETHEUS_VERSION) into bin/ (first time: a few minutes)"
	GOBIN=$(BIN) $(GO) install github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS_VERSION)

# The real Temporal server (temporal-server, temporal-sql-tool and the schema
# files of the same tag) at the version pinned in internal/testkit/cluster/server/go.mod,
# a module of its own so that the server's dependencies never move the SDK's.
# The first build takes several minutes and a few GB of memory.
CLUSTER_MODULE := internal/testkit/cluster/server
cluster-tools: $(BIN)/temporal-server $(BIN)/temporal-sql-tool $(BIN)/temporal-schema

$(BIN)/temporal-server: $(CLUSTER_MODULE)/go.mod
	@echo "building temporal-server into bin/ (first time: several minutes)"
	cd $(CLUSTER_MODULE) && $(GO) build -o $@ go.temporal.io/server/cmd/server

$(BIN)/temporal-sql-tool: $(CLUSTER_MODULE)/go.mod
	cd $(CLUSTER_MODULE) && $(GO) build -o $@ go.temporal.io/server/cmd/tools/sql

$(BIN)/temporal-schema: $(CLUSTER_MODULE)/go.mod
	rm -rf $@ && mkdir -p $@
	cp -R "$$(cd $(CLUSTER_MODULE) && $(GO) list -m -f '{{.Dir}}' go.temporal.io/server)/schema/postgresql/v12/." $@/
	chmod -R u+w $@

# What the Helm chart's tests (deploy/helm) validate its objects against, from
# the Go module proxy so that the tests need no network: Kubernetes' OpenAPI v3
# documents (one per group-version) of K8S_OPENAPI_VERSION, and KEDA's
# ScaledObject and TriggerAuthentication CRDs with the source of its Temporal
# scaler (the trigger's metadata keys; kept as .go.txt, which go build ./...
# leaves alone) of KEDA_VERSION; copied again when this Makefile changes (its
# versions). make k8s-openapi.
K8S_OPENAPI_VERSION := v1.37.2
KEDA_VERSION := v2.21.0
.PHONY: k8s-openapi
k8s-openapi: $(BIN)/k8s-openapi
$(BIN)/k8s-openapi: Makefile
	rm -rf $@ $@.tmp && mkdir -p $@.tmp/kubernetes $@.tmp/keda
	$(GO) mod download k8s.io/kubernetes@$(K8S_OPENAPI_VERSION) github.com/kedacore/keda/v2@$(KEDA_VERSION)
	cp "$$($(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes@$(K8S_OPENAPI_VERSION))"/api/openapi-spec/v3/*.json $@.tmp/kubernetes/
	keda="$$($(GO) list -m -f '{{.Dir}}' github.com/kedacore/keda/v2@$(KEDA_VERSION))" && \
		cp "$$keda"/config/crd/bases/keda.sh_scaledobjects.yaml "$$keda"/config/crd/bases/keda.sh_triggerauthentications.yaml $@.tmp/keda/ && \
		cp "$$keda"/pkg/scalers/temporal_scaler.go $@.tmp/keda/temporal_scaler.go.txt
	printf 'kubernetes %s\nkeda %s\n' $(K8S_OPENAPI_VERSION) $(KEDA_VERSION) >$@.tmp/VERSIONS
	chmod -R u+w $@.tmp && mv $@.tmp $@

# Jaeger v2 (OTLP receivers, in-memory storage, query API and trace UI) at the
# version pinned in internal/testkit/jaeger/server/go.mod, a module of its own
# like the Temporal server's: the trace viewer of make run and the OTLP
# receiver of the tracing tests. The first build takes several minutes; later
# builds reuse the Go build cache, and the binary is rebuilt only when that
# go.mod changes.
JAEGER_MODULE := internal/testkit/jaeger/server
$(JAEGER): $(JAEGER_MODULE)/go.mod
	@echo "building jaeger into bin/ (first time: several minutes)"
	cd $(JAEGER_MODULE) && $(GO) build -o $@ github.com/jaegertracing/jaeger/cmd/jaeger

# The Temporal CLI on PATH is used if there is one; otherwise bin/temporal is built.
TEMPORAL_FOR_RUN := $(or $(shell command -v temporal 2>/dev/null),$(TEMPORAL))

build:
	$(GO) build -o $(BIN)/ ./worker ./starter ./internal/cmd/devrun ./internal/cmd/cluster

# Writes the Grafana dashboards' JSON (deploy/grafana/dashboards) from their
# Go code in deploy/grafana; a test fails when the two differ (docs/dashboards.md).
.PHONY: dashboards
dashboards:
	cd deploy && $(GO) generate ./grafana/

# Starts a local Temporal dev server (state in data/, Web UI on 127.0.0.1:8233)
# unless TEMPORAL_ADDRESS names one, the worker, and a demo; Ctrl-C stops all.
run: build $(TEMPORAL_FOR_RUN) $(NATS_SERVER)
	TEMPORAL_CLI=$(TEMPORAL_FOR_RUN) $(BIN)/devrun

# make run on a real Temporal server on the local PostgreSQL (databases
# temporal and temporal_visibility, frontend on 127.0.0.1:7633, state kept
# between runs; config and server log in data/cluster/) instead of the dev server.
# CLUSTER_TOPOLOGY=split runs frontend, matching, two history hosts and the
# internal worker as processes of their own with 16 history shards (databases
# temporal_split and temporal_split_visibility; configs and one log per
# process in data/cluster-split/).
CLUSTER_TOPOLOGY ?= one
run-cluster: build cluster-tools
	$(BIN)/cluster -dir data/cluster$(if $(filter split,$(CLUSTER_TOPOLOGY)),-split) -topology $(CLUSTER_TOPOLOGY) -- $(BIN)/devrun

# gofmt, go vet, staticcheck, errcheck (production code; the calls in
# .lint/errcheck-exclude.txt need no check) and workflowcheck on the workflows;
# go vet, staticcheck and errcheck on the deploy module too.
lint: $(WORKFLOWCHECK) $(STATICCHECK) $(ERRCHECK)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(ERRCHECK) -ignoretests -exclude .lint/errcheck-exclude.txt ./...
	$(WORKFLOWCHECK) ./workflows/...
	cd deploy && $(GO) vet ./... && $(STATICCHECK) ./... && $(ERRCHECK) -ignoretests ./...

# The test suites, by what each package's tests import (make test-suites,
# through go list): a package whose tests import internal/testkit/cluster, or
# a package that does, is in the real-server suite (temporal-server on
# PostgreSQL: cluster-tools); one whose tests reach internal/testkit/jaeger is
# in the Jaeger suite (bin/jaeger); every other package is make test's. The
# TypeScript suite is the tests named TestTypeScript* (Node, npm and
# clients/ts/node_modules), which the other suites skip. So a new test
# package lands in its suite by what it imports.
MODULE := github.com/entityflow/entityflow
CLUSTER_KIT := $(MODULE)/internal/testkit/cluster
JAEGER_KIT := $(MODULE)/internal/testkit/jaeger
# Packages whose tests import the cluster kit only for benchmarks (feed's) or
# behind a flag that defaults to the dev server (ingest's -ingest-server):
# their tests need no heavy tool, so they are make test's.
KIT_NOT_IN_TESTS := $(MODULE)/internal/tests/integration/feed $(MODULE)/internal/tests/integration/ingest
TYPESCRIPT_TESTS := TestTypeScript
TEST_SUITES := $(BIN)/test-suites.txt
# make test points TEMPORAL_CLUSTER_BIN and JAEGER into this folder, which is
# never built, so that a test of its suite that would start temporal-server
# or jaeger skips (fails under REQUIRE_SERVICES=1) instead of passing on a
# tool make test does not build: CI's make test-all runs make test first.
NOT_IN_MAKE_TEST := $(BIN)/not-built-by-make-test
GO_TEST := $(GO) test -race -count=1 -timeout 30m

# The suites' awk: reads `go list -deps` (each package and its dependencies),
# a "--" line, then per package its tests' imports, "|" and its test files
# (passing over bin/, where the tools and their data go, never a package);
# prints "suite package" per package and "typescript package" per package
# with TypeScript tests; fails when a package's tests need both heavy tools
# (each suite builds one) or KIT_NOT_IN_TESTS names a package it should not.
define TEST_SUITES_AWK
BEGIN { n = split(exempt, e, " "); for (i = 1; i <= n; i++) exempt_[e[i]] = 1 }
$$1 == "--" { tests = 1; next }
!tests {
	for (i = 2; i <= NF; i++) { if ($$i == cluster) c[$$1] = 1; if ($$i == jaeger) j[$$1] = 1 }
	next
}
index($$1, module "/bin/") == 1 { next }
{
	rc = $$1 == cluster; rj = $$1 == jaeger; files = 0; typescript = 0
	for (i = 2; i <= NF; i++) {
		if ($$i == "|") { files = 1; continue }
		if (files) {
			while ((getline line < $$i) > 0) if (line ~ "^func " ts) typescript = 1
			close($$i)
		} else if ($$i != $$1) {
			if ($$i == cluster || c[$$i]) rc = 1
			if ($$i == jaeger || j[$$i]) rj = 1
		}
	}
	if ($$1 in exempt_) {
		seen[$$1] = 1
		if (!rc && !rj) { print "make test-suites: the tests of " $$1 " import no heavy tool's kit: drop it from KIT_NOT_IN_TESTS" > "/dev/stderr"; bad = 1 }
		rc = rj = 0
	}
	if (rc && rj) { print "make test-suites: the tests of " $$1 " need both temporal-server and jaeger, and each suite builds one: split the package" > "/dev/stderr"; bad = 1 }
	print (rc ? "real-server" : rj ? "jaeger" : "test"), $$1
	if (typescript) print "typescript", $$1
}
END {
	if (!tests) exit 1
	for (p in exempt_) if (!(p in seen)) { print "make test-suites: KIT_NOT_IN_TESTS names " p ", which is no package of the module" > "/dev/stderr"; bad = 1 }
	exit bad
}
endef
export TEST_SUITES_AWK

# Writes bin/test-suites.txt ("suite package" lines) and prints how many
# packages each suite has; every package of `go list ./...` is in exactly one
# of test, real-server and jaeger (TypeScript tests' packages also in
# typescript), else it fails.
test-suites:
	@mkdir -p $(BIN)
	@set -o pipefail; { $(GO) list -e -deps -f '{{.ImportPath}} {{join .Deps " "}}' ./... && echo -- && \
		$(GO) list -e -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}} |{{range .TestGoFiles}} {{$$.Dir}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$$.Dir}}/{{.}}{{end}}' ./...; } \
		| awk -v module=$(MODULE) -v cluster=$(CLUSTER_KIT) -v jaeger=$(JAEGER_KIT) -v exempt="$(KIT_NOT_IN_TESTS)" -v ts=$(TYPESCRIPT_TESTS) "$$TEST_SUITES_AWK" >$(TEST_SUITES).new \
		|| { rm -f $(TEST_SUITES).new; exit 1; }
	@mv $(TEST_SUITES).new $(TEST_SUITES)
	@awk '{ n[$$1]++ } END { printf "test suites (%s): test %d, real-server %d, jaeger %d packages; typescript tests in %d\n", FILENAME, n["test"], n["real-server"], n["jaeger"], n["typescript"] }' $(TEST_SUITES)

# $(call run-suite,SUITE,FLAGS,ENV): go test FLAGS on SUITE's packages (from
# bin/test-suites.txt), with the environment assignments ENV.
run-suite = pkgs=$$(awk '$$1 == "$(1)" { print $$2 }' $(TEST_SUITES)) && \
	if [ -z "$$pkgs" ]; then echo "no packages in the $(1) suite"; else $(3) $(GO_TEST) $(2) $$pkgs; fi

# make test: unit tests (Temporal's test suite), fuzz seeds, replay of
# recorded histories, and integration tests against real dev servers, NATS
# servers, PostgreSQL and Redis: every package but the real-server and
# Jaeger suites', without the TypeScript tests, with only bin/temporal and
# bin/nats-server built; then the deploy module's tests (dashboards,
# Prometheus rules through bin/promtool, the Helm chart against the
# Kubernetes schemas in bin/k8s-openapi). REQUIRE_SERVICES=1 turns a missing
# service into a failure.
test: $(TEMPORAL) $(NATS_SERVER) $(BIN)/promtool $(BIN)/k8s-openapi test-suites
	$(call run-suite,test,-skip '^$(TYPESCRIPT_TESTS)',TEMPORAL_CLUSTER_BIN=$(NOT_IN_MAKE_TEST) JAEGER=$(NOT_IN_MAKE_TEST)/jaeger)
	cd deploy && $(GO_TEST) ./...

# make test-all, what CI runs: make test, then the suites that need a heavy
# tool, each building its own first. The real server's tests run several
# worker processes and restarts on PostgreSQL; its packages take turns with
# it (a file lock), and a package's wait counts towards its timeout, hence
# -timeout.
test-all: test test-real-server test-jaeger test-typescript

test-real-server: $(TEMPORAL) $(NATS_SERVER) cluster-tools test-suites
	$(call run-suite,real-server,-skip '^$(TYPESCRIPT_TESTS)')

test-jaeger: $(TEMPORAL) $(NATS_SERVER) $(JAEGER) test-suites
	$(call run-suite,jaeger,-skip '^$(TYPESCRIPT_TESTS)')

test-typescript: $(TEMPORAL) $(TS_CLIENT_MODULES) test-suites
	$(call run-suite,typescript,-run '^$(TYPESCRIPT_TESTS)')

test-short:
	$(GO) test -short -count=1 ./...
	cd deploy && $(GO) test -short -count=1 ./...

# Benchmarks with their baselines side by side; benchstat prints ratios per column.
# The dedup window (beside the Window it replaced); log_run on SQLite and PostgreSQL; the event router against
# raw ExecuteWorkflow on a local dev server; the idempotency layer's added
# latency per key store against the bare handler; the points command end to end;
# the auth and tenant-limit layer's added latency (API key, JWT) against the
# bare handler; point events from a JetStream stream to applied against the
# same events sent straight through the Go client, and with 1, 2 and 3 ingress
# processes sharing the partitions (bin/nats-server of their own).
bench: $(BENCHSTAT) $(TEMPORAL) $(NATS_SERVER)
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./dedup/ ./internal/service/idempotency/memory/ | tee bench.txt
	$(BENCHSTAT) -col /impl -filter '.name:/^Window/' bench.txt
	$(BENCHSTAT) -filter '-.name:/^Window/' bench.txt
	$(GO) test -run '^$$' -bench LogRun -benchtime 2s -count $(BENCH_COUNT) ./store/ | tee bench-store.txt
	$(BENCHSTAT) bench-store.txt
	$(GO) test -run '^$$' -bench Starts -benchtime 2s -count $(BENCH_COUNT) ./internal/tests/integration/platform/ | tee bench-router.txt
	$(BENCHSTAT) -col /impl bench-router.txt
	$(GO) test -run '^$$' -bench IdempotencyOverhead -benchtime 3s -count $(BENCH_COUNT) ./internal/service/idempotency/ | tee bench-http.txt
	$(BENCHSTAT) -col /store bench-http.txt
	$(GO) test -run '^$$' -bench PointsAPI -benchtime 5s -count $(BENCH_COUNT) ./internal/tests/integration/api/ | tee bench-api.txt
	$(BENCHSTAT) -col /via bench-api.txt
	$(GO) test -run '^$$' -bench AuthOverhead -benchtime 3s -count $(BENCH_COUNT) ./internal/service/auth/ | tee bench-auth.txt
	$(BENCHSTAT) -col /layer bench-auth.txt
	$(GO) test -run '^$$' -bench Ingress -benchtime 4000x -count $(BENCH_COUNT) ./internal/tests/integration/ingest/ | tee bench-ingest.txt
	$(BENCHSTAT) -col /via bench-ingest.txt

# Replicas of every program on the production shape: the JetStream ingress's
# events/s with 1, 2 and 3 processes on temporal-server as separate services
# on PostgreSQL (frontend, matching, two history hosts, 16 shards) with three
# rewards worker processes, then one worker SIGKILLed half-way through;
# every balance checked exact (docs/performance.md).
.PHONY: bench-replicas
bench-replicas: $(BENCHSTAT) $(NATS_SERVER) cluster-tools
	INGEST_BENCH_SERVER=split $(GO) test -run '^$$' -bench IngressProcesses -benchtime 4000x -count 3 -timeout 60m ./internal/tests/integration/ingest/ | tee bench-replicas.txt
	$(BENCHSTAT) bench-replicas.txt

# What keeping tenants apart on the bus costs the NATS server at 1, 10 and 100
# tenants: the ingress's arrangement (one points stream without a duplicate
# window) beside a stream per tenant sourced into it (docs/ingress.md).
.PHONY: bench-isolation
bench-isolation: $(BENCHSTAT) $(NATS_SERVER)
	$(GO) test -run '^$$' -bench TenantIsolation -benchtime 20x -count 3 ./internal/tests/integration/ingest/ | tee bench-isolation.txt
	$(BENCHSTAT) -col /design bench-isolation.txt

# Temporal as separate services, under load (internal/tests/integration/failover):
# the split cluster (frontend, matching, two history hosts, internal worker;
# 16 shards; databases temporal_split_test*) with the worker program and its
# JetStream ingress, and the HTTP API in process; 20 customers receiving 100
# events/s over HTTP (each retried under its key until answered) while a
# history host is SIGKILLed, the matching host restarted, the frontend
# restarted. Prints each step's recovery time and p99 before, during and
# after (lines "failover:"; the whole log in bench-failover.txt), and checks
# every entity's totals. About 6 minutes; the same test at a small load runs
# in make test.
.PHONY: bench-failover
bench-failover: cluster-tools $(NATS_SERVER)
	FAILOVER_BENCH=1 $(GO) test -count=1 -v -timeout 30m -run '^TestSplitClusterFailover$$' ./internal/tests/integration/failover/ >bench-failover.txt 2>&1; \
	rc=$$?; grep -E 'failover: |^(ok|FAIL|--- )' bench-failover.txt; exit $$rc

# A fleet-wide nudge measured: NUDGE_ENTITIES idle rewards entities pinned on
# version A, B made current, then `starter deploy nudge`'s adaptive sweep
# moves them while live traffic (the load harness's client mode, 100/s by
# default) runs; then the same sweep over as many bare workflows that
# continue as new on a signal (the baseline), in the same run. It prints the
# entities moved per second, the live p99 alone and during each sweep, and
# the hours per million. It starts temporal-server on PostgreSQL as
# bin/cluster does (databases temporal_nudgebench*, a new namespace per run,
# log in data/nudgebench-cluster/); NUDGE_FLAGS='-temporal 127.0.0.1:PORT'
# targets a running server instead (another topology), the rest
# `go run ./internal/cmd/nudgebench -h`.
NUDGE_ENTITIES ?= 2000
NUDGE_FLAGS ?=
.PHONY: bench-nudge
bench-nudge: cluster-tools
	@mkdir -p data
	$(GO) run ./internal/cmd/nudgebench -entities $(NUDGE_ENTITIES) $(NUDGE_FLAGS)

# A short load run against a self-started server with the rewards worker and
# the HTTP API in process: raw UpdateWithStart of a do-nothing workflow (the
# baseline), the Go client and the HTTP API, each in the traffic shapes of
# LOAD_SHAPE (uniform, new, existing, hot, zipf, tenants; comma-separated)
# with 10% redeliveries; per step throughput, latency percentiles and
# answers, the ratios against the baseline and the exact-totals check. The
# report names the runtime, the server's version and its persistence.
# LOAD_SERVER=dev (default: the dev server, in memory) or cluster
# (temporal-server on PostgreSQL, as `make run-cluster`; databases
# temporal_load*, log in data/load-cluster/). The default uniform shape takes
# about 2 minutes; zipf alone runs 5 minutes per mode. LOAD_FLAGS changes the
# rest (go run ./internal/cmd/load -h). The harness's log goes to
# data/load.log.
LOAD_SHAPE ?= uniform
LOAD_SERVER ?= dev
LOAD_FLAGS ?= -timeout 5s -settle 5s
.PHONY: load
load: $(TEMPORAL_FOR_RUN) $(if $(filter cluster,$(LOAD_SERVER)),cluster-tools)
	@mkdir -p data
	TEMPORAL_CLI=$(TEMPORAL_FOR_RUN) $(GO) run ./internal/cmd/load -shape $(LOAD_SHAPE) -server $(LOAD_SERVER) $(LOAD_FLAGS) 2>data/load.log \
		|| { echo "load failed; the end of data/load.log:"; tail -n 20 data/load.log; exit 1; }

# What one applied point event costs on each path it can take (docs/cost.md):
# temporal-server on PostgreSQL as bin/cluster runs it, on databases of its
# own (temporal_cost, temporal_cost_visibility; frontend on 127.0.0.1:9133,
# log in data/cost-cluster/), the worker, the HTTP API and the ingress in
# process on a nats-server of its own; per path the events applied, Temporal
# Cloud Actions per event by kind, history events and bytes, PostgreSQL
# writes, commits and bytes per event, and the ContinueAsNew's share. About
# 3 minutes (the sparse path waits one). COST_FLAGS sets the mix and the
# paths (go run ./internal/cmd/cost -h).
COST_FLAGS ?=
.PHONY: cost
cost: $(NATS_SERVER) cluster-tools
	@mkdir -p data
	$(GO) run ./internal/cmd/cost $(COST_FLAGS)

fuzz:
	$(GO) test ./dedup -run '^$$' -fuzz '^FuzzWindowDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./dedup -run '^$$' -fuzz '^FuzzWindowOperations$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/service/idempotency -run '^$$' -fuzz '^FuzzRequestFingerprint$$' -fuzztime $(FUZZTIME)
	$(GO) test ./contracts -run '^$$' -fuzz '^FuzzParseEventEnvelope$$' -fuzztime $(FUZZTIME)
	$(GO) test ./contracts -run '^$$' -fuzz '^FuzzParseActivityDefinition$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/service/idempotency -run '^$$' -fuzz '^FuzzIdempotencyRequest$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/service/auth -run '^$$' -fuzz '^FuzzAuthorizationHeader$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/infra/payloadcodec -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/service/apiserver -run '^$$' -fuzz '^FuzzAPI$$' -fuzztime $(API_FUZZTIME) -fuzzminimizetime 10s -parallel 1

# Records workflow histories from real dev servers into workflows/testdata/
# (gzip, listed in its manifest.json) under the current releases
# (histories.RewardsRelease, PlatformRelease); earlier releases' files stay,
# and the replay tests refuse a set that lost one (retire a fixture on purpose
# in the manifest's "retired" list, with the date and the reason).
# The integration tests are the one place that records: the rewards scenarios
# and bursts (all but the 12,000-signal stream, whose histories would weigh
# megabytes; of a burst's runs, those that show something new), the runs of
# an entity through a versioned deploy and a rollback (real server), and the
# activity platform's runs, tasks and schedule fires, the change feed's
# entities (ContinueAsNew with unpublished changes, a NATS outage, an
# unenroll behind a batch waiting for room, a worker that died mid-publish)
# and a fresh start whose input does not decode.
histories: $(TEMPORAL) $(NATS_SERVER) cluster-tools
	RECORD_HISTORIES=1 $(GO) test -count=1 -run '^(TestServerScenarios|TestTriplicatedEventsAcrossContinueAsNew|TestWorkerKilledMidBurst|TestServerRestartOnSameDatabase|TestVersionedDeployMovesEveryEntityAtContinueAsNew|TestUndecodableFreshStartFailsAtOnce)$$' ./internal/tests/integration/
	RECORD_HISTORIES=1 $(GO) test -count=1 -run '^(TestEventDeliveredTenTimesRunsOnce|TestExistingTaskChildIsTreatedAsStarted|TestMisfirePoliciesAfterFiveMissedIntervals|TestRedeliveryAfterRetentionRunsNoTaskTwice|TestRunCancelledWhileLoggingEndsFailed|TestTaskCancelledWhileLoggingEndsFailed)$$' ./internal/tests/integration/platform/
	RECORD_HISTORIES=1 $(GO) test -count=1 -run '^(TestFeedThroughContinueAsNew|TestFeedNATSOutage|TestFeedUnenrollWaitsForABatchHeldByTheOutbox|TestFeedWorkerDiedMidPublishPastTheWindow|TestFeedStuckOutboxListedAndDiscarded)$$' ./internal/tests/integration/feed/

clean:
	rm -rf bin data bench.txt bench-store.txt bench-router.txt bench-http.txt bench-api.txt bench-auth.txt bench-ingest.txt bench-isolation.txt bench-replicas.txt bench-failover.txt
