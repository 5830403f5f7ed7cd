#!/usr/bin/env bash
# Fails (exit 1, with a unified diff) when artifacts/crds/ does not match what
# hack/update-codegen.sh would generate from the Rust API types: a stale file, a hand edit,
# a missing file or an extra one. Nothing in the tree is modified.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT

cargo run --quiet --package sample-controller-codegen -- --out "${TMP}/crds" >/dev/null
mkdir -p artifacts/crds

status=0
# File lists first: -N below treats a missing file as empty, so an extra empty file would
# otherwise go unnoticed.
diff -u --label "files in artifacts/crds" --label "files generated" \
  <(cd artifacts/crds && find . -type f | sort) <(cd "${TMP}/crds" && find . -type f | sort) || status=1
diff -ruN artifacts/crds "${TMP}/crds" || status=1

if [[ ${status} -eq 0 ]]; then
  echo "artifacts/crds is up to date."
else
  echo >&2
  echo "artifacts/crds is out of date with the Rust types in controller/src/apis/." >&2
  echo "Run hack/update-codegen.sh and commit the result." >&2
  exit 1
fi
