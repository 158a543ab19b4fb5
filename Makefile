# opgate: the two commands are `make run` and `make test`.
# Both use a throwaway PostgreSQL under target/pg/ unless DATABASE_URL is set.

CARGO ?= cargo
WITH_PG := scripts/with-postgres.sh
# The test cluster is thrown away, so durability buys nothing there.
TEST_PG_SETTINGS := -c fsync=off -c synchronous_commit=off -c full_page_writes=off

.PHONY: build test python-tools run lint fmt clean-pg bench bench-quick bench-telemetry

build:
	$(CARGO) build --workspace --bins

## test: the whole suite against a throwaway PostgreSQL it starts and stops itself.
test: python-tools
	$(CARGO) build --workspace --bins --tests
	PG_SETTINGS="$(TEST_PG_SETTINGS)" $(WITH_PG) scripts/run-tests.sh

## python-tools: the pinned Python tools the tests run (localstripe), in target/pytools.
python-tools:
	scripts/python-tools.sh

## run: PostgreSQL, migrations, a demo agent, intake, and a short agent scenario.
run: build
	$(WITH_PG) scripts/demo.sh

## bench: opgate beside pgbench on the same SQL, written to docs/benchmarks.md (~10 min).
bench:
	$(CARGO) build --release --workspace --bins
	$(WITH_PG) bench/run.sh full

## bench-quick: the same scenarios, shorter (under 2 minutes).
bench-quick:
	$(CARGO) build --release --workspace --bins
	$(WITH_PG) bench/run.sh quick

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
