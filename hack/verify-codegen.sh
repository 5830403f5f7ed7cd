#!/usr/bin/env bash
# Fails (exit 1, with a unified diff) when artifacts/crds/ or the Helm chart's crds/ does not
# match what hack/update-codegen.sh would generate from the Rust API types: a stale file, a hand
# edit, a missing file or an extra one. Nothing in the tree is modified.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT

cargo run --quiet --package sample-controller-codegen -- --out "${TMP}/crds" >/dev/null

status=0
for dir in artifacts/crds artifacts/charts/sample-controller/crds; do
  mkdir -p "${dir}"
  # File lists first: -N below treats a missing file as empty, so an extra empty file would
  # otherwise go unnoticed.
  diff -u --label "files in ${dir}" --label "files generated" \
    <(cd "${dir}" && find . -type f | sort) <(cd "${TMP}/crds" && find . -type f | sort) || status=1
  diff -ruN "${dir}" "${TMP}/crds" || status=1
done

if [[ ${status} -eq 0 ]]; then
  echo "artifacts/crds and artifacts/charts/sample-controller/crds are up to date."
else
  echo >&2
  echo "The generated CRDs are out of date with the Rust types in operators/src/apis/." >&2
  echo "Run hack/update-codegen.sh and commit the result." >&2
  exit 1
fi
