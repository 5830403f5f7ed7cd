#!/usr/bin/env bash
# The /machinery page in a real browser: installs Debian's chromium when no Chromium is on the
# PATH (apt-get, as root; otherwise it says how and the test skips), then runs the browser test
# (tests/integration/controller_runtime/manager_page.rs): headless Chromium loads the page from a running manager
# while the book's example At goes PENDING -> RUNNING -> DONE, and the test checks the diagram,
# its live counts and the traced key's hops in the DOM the page built.
#
# usage (from the repository root):  hack/test-machinery-page.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

have_chromium() {
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
    || command -v google-chrome >/dev/null 2>&1
}

if ! have_chromium; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium (apt-get install chromium)..."
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
  else
    echo "no Chromium on the PATH, and this is not a root shell with apt-get: install Debian's" >&2
    echo "chromium (sudo apt-get install chromium) to run the browser test; it skips otherwise." >&2
  fi
fi

cargo nextest run -p sample-controller --no-fail-fast --success-output immediate \
  -E 'test(/^controller_runtime::manager_page::/)'
