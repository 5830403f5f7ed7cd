#!/usr/bin/env bash
# Regenerates artifacts/crds/*.yaml from the Rust API types in controller/src/apis/.
# Run it after changing any type there, and commit the result.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
cargo run --quiet --package sample-controller-codegen -- --out "${ROOT}/artifacts/crds"
