# syntax=docker/dockerfile:1.7
#
# snowmint container image.
#
#   docker build -t snowmint:dev .
#   docker run --rm -p 50051:50051 -p 9464:9464 \
#       -v snowmint-state:/var/lib/snowmint snowmint:dev \
#       serve --worker-id 0 --state-dir /var/lib/snowmint
#
# Needs BuildKit (the default builder since Docker 23) for the cache mounts.
# Base images are pinned to explicit versions; bump them together with the
# toolchain the project is tested on. For fully reproducible builds also pin
# the digests (FROM image:tag@sha256:...).

# ---------------------------------------------------------------------------
# Build stage
# ---------------------------------------------------------------------------
FROM rust:1.95.0-slim-bookworm AS builder

WORKDIR /src

# The cargo profile the binary is built with: release, the one to ship.
# scripts/checks/image builds with image-test (Cargo.toml), which compiles in a
# fraction of the time, to keep the test command short. Any profile but dev
# works (cargo puts dev's output in target/debug).
ARG CARGO_PROFILE=release

COPY . .

# The registry and target directories are BuildKit cache mounts: a rebuild
# after an edit to src/ neither downloads nor recompiles the dependencies.
# (protoc is vendored by a crate, so no system protobuf packages are needed.)
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --profile "${CARGO_PROFILE}" --locked \
    && install -D -m 0755 "target/${CARGO_PROFILE}/snowmint" /out/snowmint

# ---------------------------------------------------------------------------
# Runtime stage
# ---------------------------------------------------------------------------
# debian slim rather than distroless: the Kubernetes preStop hook runs
# `sleep` inside the container (exec hooks need a binary; the native `sleep`
# lifecycle action only exists from Kubernetes 1.29/1.30, and 1.27 is the
# minimum targeted).
FROM debian:bookworm-20260824-slim

ARG APP_UID=10001
ARG APP_GID=10001

# Fixed numeric IDs so that Kubernetes' runAsNonRoot can verify them.
# /var/lib/snowmint is the state directory for standalone mode (--state-dir);
# mount a persistent volume there.
RUN groupadd --system --gid "${APP_GID}" snowmint \
    && useradd --system --uid "${APP_UID}" --gid "${APP_GID}" --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin snowmint \
    && install -d -o "${APP_UID}" -g "${APP_GID}" -m 0750 /var/lib/snowmint

# System CA bundle (from the builder's ca-certificates package) for TLS peers
# verified against the system trust store.
COPY --from=builder /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=builder /out/snowmint /usr/local/bin/snowmint

ENV SNOWMINT_LISTEN=0.0.0.0:50051 \
    SNOWMINT_ADMIN_LISTEN=0.0.0.0:9464

USER ${APP_UID}:${APP_GID}
WORKDIR /var/lib/snowmint

# 50051: gRPC (IdService, health, reflection); 9464: admin HTTP
# (/metrics, /healthz, /readyz).
EXPOSE 50051 9464

# snowmint handles SIGTERM itself: stop accepting, finish in-flight calls,
# persist the reservation, revoke the etcd lease, exit 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/snowmint"]
CMD ["serve"]
