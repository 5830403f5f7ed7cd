#!/usr/bin/env bash
# Where the controller manager's time goes, in instructions (valgrind's callgrind: the same
# figures on a busy machine as on an idle one, unlike wall or CPU time).
#
# Starts a standalone API server (the release build, at full speed), applies the CRDs, seeds N
# v1 Ats due at once (the shared bench's seed.py), then runs the manager (`run --controllers at`,
# default flags otherwise) under callgrind until one list + watch (seed.py wait-done) sees every
# At DONE. Prints the manager's instructions in all and per At (its start and initial list
# included, so compare runs of one N). The dump stays in the printed directory:
#   callgrind_annotate --inclusive=yes $dir/callgrind.out | head -60
#
#   hack/profile-manager.sh 3000               # N=3000 Ats (docs/13: "Where the manager's time goes")
#   MANAGER_BIN=path hack/profile-manager.sh 3000   another build of the manager (an A/B run)
#   SHARED=dir   where seed.py lives (default ../shared/bench)
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-$PWD/../shared/bench}
[ -f "$SHARED/seed.py" ] || { echo "no $SHARED/seed.py (set SHARED=...)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
N=${1:-2000}
cargo build --release --quiet --bin sample-controller
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/sample-controller
MANAGER=${MANAGER_BIN:-$BIN}
dir=$(mktemp -d)
kc=$dir/kubeconfig
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
due=$(python3 -c "import datetime as d;print((d.datetime.now(d.timezone.utc)-d.timedelta(seconds=5)).strftime('%Y-%m-%dT%H:%M:%SZ'))")
"$BIN" apiserver --listen "127.0.0.1:$port" --kubeconfig-out "$kc" --pod-run-time 0s >"$dir/apiserver.log" 2>&1 &
api=$!
manager=
cleanup() {
  [ -n "$manager" ] && kill -INT "$manager" 2>/dev/null
  kill "$api" 2>/dev/null
  wait 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 1 100); do [ -s "$kc" ] && break; sleep 0.1; done
[ -s "$kc" ] || { echo "the API server did not start; see $dir/apiserver.log" >&2; exit 1; }
kubectl --kubeconfig "$kc" apply -f artifacts/crds/ >/dev/null
python3 "$SHARED/seed.py" "$kc" ats-v1 "$N" "$due"
KUBECONFIG=$kc valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" --dump-instr=no \
  "$MANAGER" run --controllers at --metrics-bind-address 0 --health-probe-bind-address 0 \
  >"$dir/manager.log" 2>&1 &
manager=$!
done_n=$(python3 "$SHARED/seed.py" "$kc" wait-done "$N" 1800 || true)
# SIGINT: the manager shuts down cleanly and callgrind writes its dump on exit.
kill -INT "$manager"
wait "$manager" || true
manager=
total=$(awk '/^(summary|totals):/{print $2; exit}' "$dir/callgrind.out")
[ -n "$total" ] || { echo "no callgrind totals; see $dir/manager.log" >&2; exit 1; }
echo "manager: N=$N done=$done_n instructions=$total per At=$(python3 -c "print(f'{$total/$N/1e6:.3f} M')")"
echo "dump: $dir/callgrind.out"
