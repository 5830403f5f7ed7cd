#!/usr/bin/env bash
# The soak (the book's chapter 7): DURATION of At churn, operator churn and faults against the
# manager (two, leader-electing) and the embedded API server, as release binaries; samples RSS,
# anonymous memory, fds, threads, Tokio tasks, queue depths, cache sizes and the server's
# history bytes into samples.csv, faults into faults.csv, checks every At DONE within its
# deadline, one pod per At and nothing left behind, then draws soak.svg (hack/soak-plot.py).
# See benches/soak.rs for every option.
#
#   hack/soak.sh 1h                              # 36,000 Ats at 10/s, a server kill every 2 min
#   hack/soak.sh 10m --rate 5 --out .local/soak  # shorter, output kept in .local/soak
#
# CARGO_TARGET_DIR is honoured. Exit status: non-zero when a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
[ $# -ge 1 ] || { echo "usage: hack/soak.sh DURATION [options of benches/soak.rs]" >&2; exit 2; }
command -v kubectl >/dev/null || { echo "soak: kubectl is needed (the churn applies objects as a user would)" >&2; exit 2; }
cargo build --release --quiet --bin sample-controller
cargo build --release --quiet -p sample-operators --bin controller-manager
export SAMPLE_CONTROLLER_BIN=$TARGET/release/sample-controller
export MANAGER_BIN=$TARGET/release/controller-manager
args=("$@")
out=""
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = --out ] && out=${args[$((i + 1))]:-}
done
if [ -z "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/soak-XXXXXX")
  args+=(--out "$out")
else
  # The driver runs in benches/ (cargo bench's directory): hand it an absolute path.
  out=$(realpath -m "$out")
  for ((i = 0; i < ${#args[@]}; i++)); do
    [ "${args[$i]}" = --out ] && args[$((i + 1))]=$out
  done
fi
status=0
cargo bench --quiet -p benches --bench soak -- "${args[@]}" || status=$?
python3 hack/soak-plot.py "$out" || echo "soak: no plot (see above); the samples are in $out/samples.csv"
exit $status
