#!/usr/bin/env bash
# The At operator on time at scale, against the embedded API server, both as separate processes
# (release builds). Reports time to all DONE, pod-create lateness (p50/p99/max, ms), requests per
# At by verb, the manager's CPU and peak RSS, events recorded/dropped, exactly-one-pod-per-At and
# the server-bound time. See benches/at.rs for what each figure means.
#
#   hack/bench-at.sh 1000                        # 1,000 Ats due at one instant a few seconds ahead
#   hack/bench-at.sh 10000 --due now             # 10,000 Ats due at once
#   hack/bench-at.sh 10000 --due now --foreign 50000
#   hack/bench-at.sh 1000 -- --workers 8         # flags after -- go to `controller-manager run`
#   hack/bench-at.sh client [20000]              # the client's requests/s at 8/64/256 in flight,
#                                                # one connection and a pool of four, then curl
#
# CARGO_TARGET_DIR is honoured (release artifacts are large: point it at a warm directory).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release --quiet --bin sample-controller
cargo build --release --quiet -p sample-operators --bin controller-manager
export SAMPLE_CONTROLLER_BIN=$TARGET/release/sample-controller
# The manager runs as the image's binary (the controller library alone).
export MANAGER_BIN=$TARGET/release/controller-manager

if [ "${1:-}" != client ]; then
  exec cargo bench --quiet -p benches --bench at -- at "$@"
fi

N=${2:-20000}
cargo bench --quiet -p benches --bench at -- client "$N"

# The same cheap GET and pod create from curl (HTTP/2, one connection, N streams in flight), if
# this curl can do parallel HTTP/2.
if ! curl --version | grep -q HTTP2; then
  echo "curl without HTTP/2: no comparison"; exit 0
fi
dir=$(mktemp -d)
trap 'kill $api 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
"$SAMPLE_CONTROLLER_BIN" apiserver --listen "127.0.0.1:$port" --kubeconfig-out "$dir/kc" --pod-run-time 0s >"$dir/api.log" 2>&1 &
api=$!
for _ in $(seq 1 100); do [ -s "$dir/kc" ] && break; sleep 0.05; done
sleep 0.5
token=$(awk '/token:/{print $2; exit}' "$dir/kc")
awk '/certificate-authority-data:/{print $2; exit}' "$dir/kc" | base64 -d >"$dir/ca.crt"
base=https://127.0.0.1:$port/api/v1/namespaces/default/pods
auth=(--cacert "$dir/ca.crt" -H "Authorization: Bearer $token")
pod() { printf '{"apiVersion":"v1","kind":"Pod","metadata":{"%s":"%s","labels":{"app":"rate"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}' "$1" "$2"; }
curl -s "${auth[@]}" -H 'Content-Type: application/json' -d "$(pod name p0)" "$base" -o /dev/null
pod generateName r- >"$dir/pod.json"
for _ in $(seq 1 "$N"); do echo "url = \"$base/p0\""; done >"$dir/get.cfg"
for _ in $(seq 1 "$N"); do echo "url = \"$base\""; done >"$dir/post.cfg"
echo
echo "| curl $(curl --version | awk 'NR==1{print $2}') --http2 --parallel | in flight | connections | requests/s |"
echo "|---|---:|---:|---:|"
for kind in get create; do
  for c in 8 64 256; do
    t0=$(date +%s.%N)
    if [ $kind = get ]; then
      curl -s --no-progress-meter --http2 --parallel --parallel-max "$c" "${auth[@]}" -K "$dir/get.cfg" -o /dev/null -w '%{http_code}\n' >"$dir/codes"
    else
      curl -s --no-progress-meter --http2 --parallel --parallel-max "$c" "${auth[@]}" -H 'Content-Type: application/json' \
        --data-binary @"$dir/pod.json" -K "$dir/post.cfg" -o /dev/null -w '%{http_code}\n' >"$dir/codes"
    fi
    t1=$(date +%s.%N)
    ok=$(grep -c '^20[01]$' "$dir/codes" || true)
    printf '| %s pod | %s | 1 | %.0f |\n' "$kind" "$c" "$(echo "$ok / ($t1 - $t0)" | bc -l)"
  done
done
