#!/usr/bin/env bash
# Regenerates the CRDs from the Rust API types in operators/src/apis/: artifacts/crds/*.yaml
# (kubectl apply -f) and the Helm chart's crds/ (the same files; Helm installs them before the
# chart's templates). Run it after changing any type there, and commit the result.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
for out in artifacts/crds artifacts/charts/sample-controller/crds; do
  cargo run --quiet --package sample-controller-codegen -- --out "${ROOT}/${out}"
done
