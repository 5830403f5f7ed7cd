#!/usr/bin/env bash
# `../shared/bench/at-vs-kube-rs.sh` with one change: the project's Ats are seeded in the At
# storage version, v1 (`spec.run.command`), instead of v1alpha1 (`spec.command`).
#
# Why: the shared script seeds the book's v1alpha1 Ats into a server that has only the base CRD
# of artifacts/crds/ (two versions, `conversion.strategy: None`, no webhook). With `None`, the
# versions differ only in `apiVersion`, so a v1alpha1 body lands in storage as a v1 object
# without `spec.run`, and the manager (which reads v1) refuses the list: `missing field run`.
# A real API server would even prune `spec.command` from it. The kube-rs peer reads v1alpha1,
# so its side keeps the shared script's v1alpha1 seeds; everything else (fresh server per side,
# the same N Ats due at once, default flags, how wall time, CPU and peak RSS are taken) is the
# shared script's (DONE is counted by its `seed.py wait-done`: one list + watch that does not decode
# the events). The project's side runs `controller-manager`, the binary the image ships. It also
# prints the API server's CPU seconds from the controller's start (`serverCPU`), since both
# controllers share two cores with their server, and a second and third line per side: wall time,
# controller CPU and server CPU per At, the server's peak RSS, and the requests the server
# served per At from the controller's start, by verb and resource (its `apiserver_request_total`;
# the embedded node's pod writes and the measuring watch are in both sides' counts).
#
# usage (from the repository root): hack/at-vs-kube-rs.sh [N] [-- extra `run` flags]
#   FOREIGN=50000 hack/at-vs-kube-rs.sh 10000   also seeds 50,000 pods no At owns
#   ONLY=project (or ONLY=kube-rs) runs one side;  SHARED=dir  where the shared bench lives
#   PROFILE=dist    builds the manager as the image does (fat LTO; the server stays release)
#   WRAP="heaptrack -o /tmp/hp"   runs the controller under a profiler (word-split, so no quoting)
#   SAMPLE_CONTROLLER_BIN=path    the API server's binary (e.g. an older build, for an A/B run)
#   MANAGER_BIN=path              the manager's binary (e.g. the image's musl build)
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-$PWD/../shared/bench}
[ -x "$SHARED/at-vs-kube-rs.sh" ] || { echo "no $SHARED/at-vs-kube-rs.sh (set SHARED=...)" >&2; exit 1; }
N=${1:-2000}; shift || true; [ "${1:-}" = "--" ] && shift
EXTRA=("$@")
cargo build --release --quiet --bin sample-controller
# The project's side runs the image's binary, the controller library alone (the API server runs
# from `sample-controller apiserver`).
PROFILE=${PROFILE:-release}
cargo build --profile "$PROFILE" --quiet -p sample-operators --bin controller-manager
BIN=${SAMPLE_CONTROLLER_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/sample-controller}
MANAGER=${MANAGER_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/$PROFILE/controller-manager}
PEER=${TMPDIR:-/tmp}/kube-at-target/release/kube-at
[ -x "$PEER" ] || (cd "$SHARED/kube-at" && CARGO_TARGET_DIR=${TMPDIR:-/tmp}/kube-at-target cargo build --release --quiet)
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
due=$(python3 -c "import datetime as d;print((d.datetime.now(d.timezone.utc)-d.timedelta(seconds=5)).strftime('%Y-%m-%dT%H:%M:%SZ'))")

# The Python both snippets below start with: the kubeconfig of argv[1] (server `base`, its CA,
# the admin token) and `session()`, an HTTP session that uses them.
KUBECONFIG_SESSION_PY='
import base64, sys, tempfile
import requests, urllib3, yaml
urllib3.disable_warnings()
cfg = yaml.safe_load(open(sys.argv[1]))
cl = cfg["clusters"][0]["cluster"]; us = cfg["users"][0]["user"]
base = cl["server"].rstrip("/")
def session():
    s = requests.Session(); s.trust_env = False
    if us.get("token"): s.headers["Authorization"] = "Bearer " + us["token"]
    if cl.get("certificate-authority-data"):
        f = tempfile.NamedTemporaryFile(delete=False, suffix=".crt")
        f.write(base64.b64decode(cl["certificate-authority-data"])); f.close(); s.verify = f.name
    return s
'

# N v1 Ats named b1..bN in `default`, due at $3, eight concurrent clients (as seed.py does).
seed_v1() {
  python3 -c "$KUBECONFIG_SESSION_PY$(cat <<'PY'
import threading
n = int(sys.argv[2]); due = sys.argv[3]
url = base + "/apis/cnat.programming-kubernetes.info/v1/namespaces/default/ats"
errors = []
def worker(k):
    s = session()
    for i in range(k + 1, n + 1, 8):
        r = s.post(url, json={"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
                              "metadata": {"name": f"b{i}"},
                              "spec": {"schedule": due, "run": {"command": f"echo {i}"}}})
        if r.status_code not in (200, 201): errors.append((i, r.status_code, r.text[:200]))
ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
if errors: print(f"{len(errors)} creates failed, first: {errors[0]}", file=sys.stderr); sys.exit(1)
PY
)" "$1" "$2" "$3"
}

# Requests served so far, by verb and resource (`apiserver_request_total` of /metrics), as JSON.
requests_by_verb() {
  python3 -c "$KUBECONFIG_SESSION_PY$(cat <<'PY'
import json, re
counts = {}
for line in session().get(base + "/metrics", timeout=30).text.splitlines():
    m = re.match(r'apiserver_request_total\{verb="([^"]*)",resource="([^"]*)",subresource="([^"]*)".*\} (\d+)', line)
    if m:
        verb, res, sub, n = m.groups()
        k = f"{verb} {res}{'/' + sub if sub else ''}"
        counts[k] = counts.get(k, 0) + int(n)
print(json.dumps(counts))
PY
)" "$1"
}

# The difference of two `requests_by_verb` snapshots, per At, largest first ("verb resource=x.xx").
requests_per_at() {
  python3 -c '
import json, sys
a, b, n = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
d = {k: v - a.get(k, 0) for k, v in b.items() if v - a.get(k, 0) > 0}
print(" ".join(f"{k.replace(chr(32), chr(58))}={v / n:.2f}" for k, v in sorted(d.items(), key=lambda kv: -kv[1]) if v / n >= 0.01))
' "$1" "$2" "$3"
}

run_one() {  # $1 = label, $2 = seeder (v1 or v1alpha1), rest = the controller's command line
  local label=$1 seed=$2; shift 2
  local dir; dir=$(mktemp -d); local kc=$dir/kubeconfig
  "$BIN" apiserver --listen "127.0.0.1:$(free_port)" --kubeconfig-out "$kc" --pod-run-time 0s >"$dir/apiserver.log" 2>&1 &
  local api=$!
  for _ in $(seq 1 100); do [ -s "$kc" ] && break; sleep 0.1; done
  kubectl --kubeconfig "$kc" apply -f artifacts/crds/ >/dev/null
  [ -n "${FOREIGN:-}" ] && python3 "$SHARED/seed.py" "$kc" foreign-pods "$FOREIGN"
  if [ "$seed" = v1 ]; then seed_v1 "$kc" "$N" "$due"; else python3 "$SHARED/seed.py" "$kc" ats "$N" "$due"; fi
  local before; before=$(requests_by_verb "$kc")
  local t0; t0=$(date +%s.%N)
  local api0; api0=$(awk '{print $14+$15}' /proc/$api/stat)
  KUBECONFIG=$kc ${WRAP:-} "$@" >"$dir/$label.log" 2>&1 &
  local pid=$!
  # One list + watch counts DONE without decoding the events (the shared bench's `wait-done`):
  # the measuring costs both sides the same and next to nothing at any N.
  local done_n; done_n=$(python3 "$SHARED/seed.py" "$kc" wait-done "$N" 600 || true)
  local t1; t1=$(date +%s.%N)
  local peak; peak=$(awk '/VmHWM/{print $2}' /proc/$pid/status 2>/dev/null || echo 0)
  local apipeak; apipeak=$(awk '/VmHWM/{print $2}' /proc/$api/status 2>/dev/null || echo 0)
  local cpu; cpu=$(awk '{printf "%.2f", ($14+$15)/100}' /proc/$pid/stat)
  local apicpu; apicpu=$(awk -v a="$api0" '{printf "%.2f", ($14+$15-a)/100}' /proc/$api/stat)
  local after; after=$(requests_by_verb "$kc")
  local pods; pods=$(kubectl --kubeconfig "$kc" get pods -n default --chunk-size=0 -o name | wc -l)
  kill "$pid" "$api" 2>/dev/null; wait "$pid" "$api" 2>/dev/null || true
  local wall; wall=$(echo "$t1 - $t0" | bc)
  printf '%-8s N=%s foreign=%s done=%s pods=%s wall=%.2fs cpu=%ss peakRSS=%sMiB serverCPU=%ss  (logs: %s)\n' \
    "$label" "$N" "${FOREIGN:-0}" "$done_n" "$pods" "$wall" "$cpu" "$((peak/1024))" "$apicpu" "$dir"
  printf '%-8s per At: wall=%.3fms cpu=%.3fms serverCPU=%.3fms  serverPeakRSS=%sMiB\n' "$label" \
    "$(echo "$wall * 1000 / $N" | bc -l)" "$(echo "$cpu * 1000 / $N" | bc -l)" "$(echo "$apicpu * 1000 / $N" | bc -l)" "$((apipeak/1024))"
  printf '%-8s requests per At (all of the server'"'"'s, the embedded node'"'"'s included): %s\n' "$label" \
    "$(requests_per_at "$before" "$after" "$N")"
}
[ "${ONLY:-project}" = project ] && run_one project v1 "$MANAGER" run --controllers at \
  --metrics-bind-address 0 --health-probe-bind-address 0 "${EXTRA[@]}"
[ "${ONLY:-kube-rs}" = kube-rs ] && run_one kube-rs v1alpha1 "$PEER"
exit 0
