# opgate: the commands are `make run`, `make test` and `make up` / `make down`.
# run and test use a throwaway PostgreSQL under target/pg/, up keeps one under
# target/up/pg; each uses the database in DATABASE_URL instead when it is set.

CARGO ?= cargo
WITH_PG := scripts/with-postgres.sh
# The test cluster is thrown away, so durability buys nothing there.
TEST_PG_SETTINGS := -c fsync=off -c synchronous_commit=off -c full_page_writes=off

.PHONY: build test python-tools deploy-tools deploy-check readme-check up down mutants \
	run lint fmt clean-pg bench bench-quick bench-queue-health bench-e2e-trace bench-peers bench-peers-quick bench-profile bench-telemetry bench-citus test-citus

build:
	$(CARGO) build --workspace --bins

## test: the Dockerfile and manifests checked offline, the README's commands run in a
## clone, then the whole suite against a throwaway PostgreSQL it starts and stops itself
## (the quick checks first, so that run-tests.sh's total is the last line). The previous
## release's binaries, which the rolling-upgrade test runs, are built once beforehand
## (scripts/previous-release.sh; about 3.5 min the first time, nothing after).
test: python-tools
	$(CARGO) build --workspace --bins --tests
	scripts/previous-release.sh >/dev/null
	scripts/deploy-check.sh
	scripts/readme-check.sh
	PG_SETTINGS="$(TEST_PG_SETTINGS)" $(WITH_PG) scripts/run-tests.sh

## test-citus: the Citus tests against the coordinator OPGATE_TEST_CITUS_URL names (a
## coordinator with its workers added; docs/scale-out.md). make test runs them too, and
## they skip themselves when it is unset.
test-citus:
	@test -n "$$OPGATE_TEST_CITUS_URL" || { echo "test-citus: set OPGATE_TEST_CITUS_URL to a Citus coordinator's URL (docs/scale-out.md)" >&2; exit 2; }
	$(CARGO) build --workspace --bins --tests
	PG_SETTINGS="$(TEST_PG_SETTINGS)" $(WITH_PG) $(CARGO) test -p opgate-e2e --test citus --test citus_routing --test citus_guardrails
	PG_SETTINGS="$(TEST_PG_SETTINGS)" $(WITH_PG) $(CARGO) test -p opgate-e2e --test outbox_rotation citus

## python-tools: the pinned Python tools the tests run (localstripe), in target/pytools.
python-tools:
	scripts/python-tools.sh

## deploy-tools: hadolint, kubernetes-validate and checkov, pinned, in target/deploytools.
deploy-tools:
	scripts/deploy-tools.sh

## deploy-check: lint the Dockerfile, validate and scan deploy/kubernetes, parse compose.yaml.
deploy-check:
	scripts/deploy-check.sh

## readme-check: a clone runs make up and the README's "Using intake" commands, then make down.
readme-check: build
	scripts/readme-check.sh

## up: PostgreSQL, provider-sim, intake, executor and reconciler left running on fixed
## ports, with a demo agent and operator; logs and pids in target/up/.
up: build
	scripts/up.sh

## down: stop what make up started (the database's files stay in target/up/pg).
down:
	scripts/down.sh

## mutants: mutation testing (scripts/mutants.sh).
mutants:
	scripts/mutants.sh

## run: PostgreSQL, migrations, a demo agent, intake, and a short agent scenario.
run: build
	$(WITH_PG) scripts/demo.sh

## bench: opgate beside pgbench on the same SQL, written to docs/benchmarks.md (~20 min).
bench:
	$(CARGO) build --release --workspace --bins
	$(WITH_PG) bench/run.sh full

## bench-quick: the same scenarios, shorter (about 4 minutes).
bench-quick:
	$(CARGO) build --release --workspace --bins
	$(WITH_PG) bench/run.sh quick

## bench-e2e-trace: rounds of payments end to end (32 clients, one executor), their pace
## every half second, what busy backends wait on, and the disk's flush latency (~1 min).
bench-e2e-trace:
	$(CARGO) build --release --workspace --bins
	$(WITH_PG) bench/e2e-trace.sh

## bench-peers: opgate beside Graphile Worker (npm, pinned in bench/peers/graphile) and
## pgqueuer (PyPI, pinned in bench/peers/pgqueuer) on the same payments, one PostgreSQL,
## written to docs/bench-peers.md (~6 min; quick: ~2 min).
bench-peers:
	$(CARGO) build --release --workspace --bins
	$(WITH_PG) bench/peers.sh full

bench-peers-quick:
	$(CARGO) build --release --workspace --bins
	$(WITH_PG) bench/peers.sh quick

## bench-profile: instructions per new operation, replay and drained operation under
## callgrind, with pg_stat_statements, written to docs/profile.md (~5 min).
bench-profile:
	$(CARGO) build --release --workspace --bins
	PG_SETTINGS="-c shared_preload_libraries=pg_stat_statements" $(WITH_PG) bench/profile.sh

## bench-queue-health: the drain with and without a held snapshot, default and tuned
## flags (~3 min; make bench runs it too).
bench-queue-health:
	$(CARGO) build --release --workspace --bins
	$(WITH_PG) bench/queue-health.sh 15000

## bench-citus: intake and the drain on a Citus coordinator beside one PostgreSQL, in
## one run (OPGATE_BENCH_CITUS_URL: a database on the coordinator; docs/scale-out.md).
bench-citus:
	$(CARGO) build --release --workspace --bins
	$(WITH_PG) bench/citus.sh

## bench-telemetry: what OTLP export costs intake, as a ratio to OTEL_* unset (needs wrk).
bench-telemetry:
	$(CARGO) build --release --workspace --bins
	$(WITH_PG) bench/telemetry-overhead.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

clean-pg:
	rm -rf target/pg target/debug/test-clusters
