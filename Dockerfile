# syntax=docker/dockerfile:1
#
# A small, static image of the controller manager: the `controller-manager` binary, built from
# the controller library alone (no embedded API server, no demo).
#
#   docker build -t sample-controller:dev .
#
# Stage 1 builds a fully static binary against musl (Alpine's Rust image targets musl, and
# Rust links musl statically by default). rustls with ring needs only a C compiler for ring's
# assembly, and jemalloc (the binary's allocator) a C compiler and make; there is no OpenSSL
# anywhere. Stage 2 is distroless "static": no shell, no package manager, just CA
# certificates, /etc/passwd with the nonroot user (65532) and tzdata.

FROM rust:1-alpine AS build
RUN apk add --no-cache musl-dev make
WORKDIR /src
COPY . .
# BuildKit caches keep the registry and target directory between builds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked -p sample-operators --bin controller-manager \
 && cp target/dist/controller-manager /controller-manager

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /controller-manager /controller-manager
USER 65532:65532
# 8080: /metrics (8443 with --metrics-secure, as artifacts/deploy runs it); 8081: /healthz and /readyz.
EXPOSE 8080 8443 8081
ENTRYPOINT ["/controller-manager"]
CMD ["run"]
