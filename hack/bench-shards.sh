#!/usr/bin/env bash
# Throughput of the At controller with 1, 2 and 4 shards, each shard a separate
# `sample-controller run --shard-mode=sharded` process, against the embedded API server (its own
# process, pods finishing at once: --pod-run-time 0s). For each configuration a fresh server
# gets N Ats already due, then the processes start; reported: seconds from the start of the
# processes to the last At DONE, Ats DONE per second, pods (must equal N: one per At), and how
# the Ats are spread over the shards. "leader" is today's single manager (--shard-mode=leader),
# for comparison: it pays no assignment writes. A number of shards followed by "s" (2s) runs the
# sharder as a process of its own (`run --controllers=sharder,at`, the shards with
# --shard-sharder=false); otherwise shard-0 hosts it.
#
#   hack/bench-shards.sh              # N=3000, configurations: leader 1 2 4
#   hack/bench-shards.sh 1000 2 4     # N=1000, 2 and 4 shards only
#   hack/bench-shards.sh 1000 4 4s    # 4 shards, the sharder on shard-0 or in its own process
#
# PROFILE=debug uses target/debug (no release build); SKIP_BUILD=1 uses the binary as it is;
# CARGO_TARGET_DIR is honoured.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-3000}
shift || true
CONFIGS=${*:-leader 1 2 4}
PROFILE=${PROFILE:-release}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
if [ -n "${SKIP_BUILD:-}" ]; then
  :
elif [ "$PROFILE" = release ]; then
  cargo build --release --quiet --bin sample-controller
else
  cargo build --quiet --bin sample-controller
fi
BIN=$TARGET/$PROFILE/sample-controller
command -v kubectl >/dev/null || { echo "kubectl not on PATH: cannot run"; exit 1; }

RING=bench
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

ats_yaml() { # N Ats due five seconds ago, as one List
  local due
  due=$(date -u -d '-5 seconds' +%Y-%m-%dT%H:%M:%SZ)
  python3 - "$1" "$due" <<'PY'
import json, sys
n, due = int(sys.argv[1]), sys.argv[2]
# v1, the storage version: the base CRD has no conversion webhook, so a v1alpha1 object
# would be stored in the wrong shape (see the apis::at module doc).
items = [{"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
          "metadata": {"name": f"at-{i}", "namespace": "default"},
          "spec": {"schedule": due, "run": {"command": "echo YAY"}}} for i in range(n)]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
}

printf '%-8s %8s %10s %8s  %s\n' config seconds "Ats/s" pods "Ats per shard"
for cfg in $CONFIGS; do
  dir=$(mktemp -d)
  port=$(free_port)
  "$BIN" apiserver --listen "127.0.0.1:$port" --kubeconfig-out "$dir/kc" --pod-run-time 0s >"$dir/api.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do [ -s "$dir/kc" ] && break; sleep 0.05; done
  k() { kubectl --kubeconfig "$dir/kc" "$@"; }
  k apply -f artifacts/crds/ >/dev/null
  for _ in $(seq 1 100); do k get ats >/dev/null 2>&1 && break; sleep 0.1; done
  ats_yaml "$N" >"$dir/ats.json"
  k create -f "$dir/ats.json" >/dev/null
  start=$(date +%s.%N)
  common=(run --kubeconfig "$dir/kc" --metrics-bind-address 0
          --health-probe-bind-address 0 --webhook-bind-address 0)
  if [ "$cfg" = leader ]; then
    "$BIN" "${common[@]}" --controllers at >"$dir/leader.log" 2>&1 &
    pids+=($!)
  else
    shards=${cfg%s}
    own_sharder=false; [ "$shards" != "$cfg" ] && own_sharder=true
    if $own_sharder; then
      "$BIN" "${common[@]}" --controllers sharder,at --shard-ring "$RING" >"$dir/sharder.log" 2>&1 &
      pids+=($!)
    fi
    for i in $(seq 0 $((shards - 1))); do
      sharder=false; [ "$i" = 0 ] && ! $own_sharder && sharder=true
      "$BIN" "${common[@]}" --controllers at --shard-mode=sharded --shard-ring "$RING" \
        --shard-id "shard-$i" --shard-sharder="$sharder" >"$dir/shard-$i.log" 2>&1 &
      pids+=($!)
    done
  fi
  done_n=0
  for _ in $(seq 1 3600); do
    done_n=$(k get ats -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^DONE$' || true)
    [ "$done_n" -ge "$N" ] && break
    sleep 0.25
  done
  end=$(date +%s.%N)
  pods=$(k get pods --no-headers 2>/dev/null | wc -l)
  spread=$(k get ats -o jsonpath="{range .items[*]}{.metadata.labels.shard\.sample-controller\.dev/$RING}{\"\n\"}{end}" \
    | sort | uniq -c | awk '{printf "%s=%s ", ($2==""?"-":$2), $1}')
  secs=$(echo "$end - $start" | bc -l)
  printf '%-8s %8.1f %10.0f %8s  %s\n' "$cfg" "$secs" "$(echo "$done_n / $secs" | bc -l)" "$pods" "${spread:-}"
  cleanup; pids=()
  rm -rf "$dir"
done
