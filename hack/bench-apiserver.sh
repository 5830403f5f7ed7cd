#!/usr/bin/env bash
# Write throughput of the embedded API server with API Priority and Fairness on and ten pod
# watches open: creates/s, updates/s, merge patches/s, p50/p99 latency and server CPU per
# request, against `sample-controller apiserver` (release build) as a separate process.
#
#   hack/bench-apiserver.sh              # 20,000 pods, 64 requests in flight
#   hack/bench-apiserver.sh 50000 128    # other sizes
set -euo pipefail
cd "$(dirname "$0")/.."
# The benchmark runs the server binary as a separate process: build it, and name it (another
# build can be compared by setting SAMPLE_CONTROLLER_BIN before running this script).
cargo build --release --quiet --bin sample-controller
export SAMPLE_CONTROLLER_BIN=${SAMPLE_CONTROLLER_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/sample-controller}
exec cargo bench -p benches --bench apiserver -- "$@"
