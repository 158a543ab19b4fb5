# syntax=docker/dockerfile:1
# The opgate image: intake, executor, reconciler, the opgate CLI and provider-sim, built
# with --locked from Cargo.lock, on a slim Debian runtime as an unprivileged user. The
# first argument picks the binary (deploy/docker/entrypoint.sh):
#
#   docker build -t opgate:dev .
#   docker run --rm opgate:dev opgate migrate          # DATABASE_URL=… in the environment
#   docker run --rm -p 8080:8080 opgate:dev intake
#
# compose.yaml runs a whole local stack from it; deploy/kubernetes/ deploys it. The
# builder and the runtime are the same Debian release (trixie), so the binaries find the
# glibc they were linked against.

# ---------------------------------------------------------------------------------
# 1. The workspace's manifests with stub sources (deploy/docker/skeleton.sh): this
#    stage reruns on any change, but its output changes only with the manifests.
# ---------------------------------------------------------------------------------
FROM rust:1.95-slim-trixie AS skeleton
WORKDIR /src
COPY . .
RUN sh deploy/docker/skeleton.sh /src /skeleton

# ---------------------------------------------------------------------------------
# 2. Dependencies, compiled against the stubs: cached until a manifest changes.
# ---------------------------------------------------------------------------------
FROM rust:1.95-slim-trixie AS builder
WORKDIR /src
# make, for jemalloc's build (intake's allocator). Debian's current make, unpinned: the
# builder's tools do not reach the runtime image.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
ENV CARGO_TERM_COLOR=never CARGO_INCREMENTAL=0
COPY --from=skeleton /skeleton/ ./
RUN cargo build --release --locked \
        --bin intake --bin executor --bin reconciler --bin opgate --bin provider-sim

# ---------------------------------------------------------------------------------
# 3. opgate itself. The copied sources may be older than the stubs' build: touch them,
#    so that cargo rebuilds every crate of the workspace from its real code.
# ---------------------------------------------------------------------------------
COPY . .
RUN find . -path ./target -prune -o -name '*.rs' -exec touch {} + \
    && cargo build --release --locked \
        --bin intake --bin executor --bin reconciler --bin opgate --bin provider-sim \
    && mkdir -p /out \
    && cp target/release/intake target/release/executor target/release/reconciler \
        target/release/opgate target/release/provider-sim /out/

# ---------------------------------------------------------------------------------
# 4. The runtime: glibc and the five binaries, nothing else. TLS to providers uses
#    rustls with built-in roots, so no CA bundle or OpenSSL is needed.
# ---------------------------------------------------------------------------------
FROM debian:trixie-slim AS runtime
RUN groupadd --system --gid 10001 opgate \
    && useradd --system --uid 10001 --gid opgate --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin opgate
COPY --from=builder /out/ /usr/local/bin/
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/opgate-entrypoint
COPY examples/catalog.toml /etc/opgate/catalog.toml
# A container listens on all its interfaces, on fixed ports (the binaries' own defaults
# are 127.0.0.1, and port 0 for the workers' metrics).
ENV INTAKE_LISTEN=0.0.0.0:8080 \
    INTAKE_METRICS_LISTEN=0.0.0.0:9464 \
    EXECUTOR_METRICS_LISTEN=0.0.0.0:9464 \
    RECONCILER_METRICS_LISTEN=0.0.0.0:9464 \
    PROVIDER_SIM_LISTEN=0.0.0.0:9090
USER 10001:10001
EXPOSE 8080 9090 9464
HEALTHCHECK --interval=10s --timeout=6s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/opgate-entrypoint", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/opgate-entrypoint"]
CMD ["help"]
