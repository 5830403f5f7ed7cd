#!/usr/bin/env bash
# Where the standalone API server's time goes, in instructions (valgrind's callgrind: the same
# figures on a busy machine as on an idle one, unlike wall or CPU time). Two parts, one server:
#
#  1. the At benchmark (hack/at-vs-kube-rs.sh's project side): N v1 Ats due at once, then the
#     manager (`controller-manager run --controllers at`) and one list + watch counting DONE
#     (seed.py wait-done), until every At is DONE. Counters are zeroed after seeding, so the
#     dump `at` is the server's instructions for the N Ats' reconciles only.
#  2. one request kind at a time, with the manager stopped and three watches open (Ats and pods
#     of all namespaces, as the manager's informers, and Ats of `default`, as wait-done): K At
#     status PUTs, K pod POSTs, K event POSTs, then 20 LISTs of the N Ats; one dump per kind.
#
# Prints the instructions per At and per request of each kind, and the requests per At by
# verb from /metrics. The dumps stay in the printed directory for callgrind_annotate:
#   callgrind_annotate --inclusive=yes $dir/callgrind.out.<pid>.<n> | head -60
#
#   hack/profile-apiserver.sh 1000            # N=1000 Ats, K=N/2 requests per kind
#   SKIP_KINDS=1 hack/profile-apiserver.sh 4000
#   SAMPLE_CONTROLLER_BIN=path MANAGER_BIN=path  other builds (an A/B run)
#   SHARED=dir   where seed.py lives (default ../shared/bench)
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-$PWD/../shared/bench}
[ -f "$SHARED/seed.py" ] || { echo "no $SHARED/seed.py (set SHARED=...)" >&2; exit 1; }
N=${1:-1000}
K=${K:-$((N / 2))}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
if [ -z "${SAMPLE_CONTROLLER_BIN:-}${MANAGER_BIN:-}" ]; then
  cargo build --release --quiet --bin sample-controller
  cargo build --release --quiet -p sample-operators --bin controller-manager
fi
BIN=${SAMPLE_CONTROLLER_BIN:-$TARGET/release/sample-controller}
MANAGER=${MANAGER_BIN:-$TARGET/release/controller-manager}
dir=$(mktemp -d)
kc=$dir/kubeconfig
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out.%p" --dump-instr=no \
  "$BIN" apiserver --listen "127.0.0.1:$port" --kubeconfig-out "$kc" --pod-run-time 0s \
  >"$dir/apiserver.log" 2>&1 &
api=$!
mgr=
cleanup() { [ -n "$mgr" ] && kill "$mgr" 2>/dev/null; kill "$api" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 600); do [ -s "$kc" ] && break; sleep 0.5; done
[ -s "$kc" ] || { echo "the server did not start: $dir/apiserver.log" >&2; exit 1; }
kubectl --kubeconfig "$kc" apply -f artifacts/crds/ >/dev/null
due=$(python3 -c "import datetime as d;print((d.datetime.now(d.timezone.utc)-d.timedelta(seconds=5)).strftime('%Y-%m-%dT%H:%M:%SZ'))")
python3 "$SHARED/seed.py" "$kc" ats-v1 "$N" "$due"
metrics() { kubectl --kubeconfig "$kc" get --raw /metrics | grep '^apiserver_request_total' || true; }
metrics >"$dir/metrics.before"
ir() {  # zero the counters (no argument) or dump them with a label
  if [ -z "${1:-}" ]; then callgrind_control -z "$api" >/dev/null; return; fi
  callgrind_control -d "$1" "$api" >/dev/null
}
ir
KUBECONFIG=$kc "$MANAGER" run --controllers at --metrics-bind-address 0 --health-probe-bind-address 0 \
  >"$dir/manager.log" 2>&1 &
mgr=$!
done_n=$(python3 "$SHARED/seed.py" "$kc" wait-done "$N" 3600 || true)
ir at
kill "$mgr"; wait "$mgr" 2>/dev/null || true; mgr=
metrics >"$dir/metrics.after"
python3 - "$dir" "$N" <<'PY'
import re, sys
d, n = sys.argv[1], int(sys.argv[2])
def read(f):
    out = {}
    for line in open(f"{d}/{f}"):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        key = (labels.get("verb", ""), labels.get("resource", "") + ("/" + labels["subresource"] if labels.get("subresource") else ""))
        out[key] = out.get(key, 0) + float(line.rsplit(" ", 1)[1])
    return out
a, b = read("metrics.after"), read("metrics.before")
diff = {k: v - b.get(k, 0) for k, v in a.items() if v - b.get(k, 0) > 0}
print("requests per At: " + ", ".join(f"{v} {r} {c / n:.2f}" for (v, r), c in sorted(diff.items(), key=lambda x: -x[1])))
PY
echo "done=$done_n of $N"

if [ -z "${SKIP_KINDS:-}" ]; then
  python3 - "$kc" "$K" "$N" "$dir" "$api" <<'PY'
import base64, json, subprocess, sys, tempfile, threading, time
import requests, urllib3, yaml
urllib3.disable_warnings()
cfg = yaml.safe_load(open(sys.argv[1])); k = int(sys.argv[2]); n = int(sys.argv[3]); d = sys.argv[4]; api = sys.argv[5]
cl = cfg["clusters"][0]["cluster"]; us = cfg["users"][0]["user"]; base = cl["server"].rstrip("/")
ca = tempfile.NamedTemporaryFile(delete=False, suffix=".crt")
ca.write(base64.b64decode(cl["certificate-authority-data"])); ca.close()
def session():
    s = requests.Session(); s.trust_env = False; s.verify = ca.name
    s.headers["Authorization"] = "Bearer " + us["token"]; return s
ats = base + "/apis/cnat.programming-kubernetes.info/v1"
def drain(url):  # a watch that reads (and drops) every event, as an informer does
    s = session()
    rv = s.get(url, params={"limit": "1"}).json()["metadata"]["resourceVersion"]
    with s.get(url, params={"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true"}, stream=True) as r:
        for _ in r.iter_lines(): pass
for u in (ats + "/ats", base + "/api/v1/pods", ats + "/namespaces/default/ats"):
    threading.Thread(target=drain, args=(u,), daemon=True).start()
time.sleep(5)
def run(label, work, count=k):
    subprocess.run(["callgrind_control", "-z", api], check=True, capture_output=True)
    errs = []
    def worker(j):
        s = session()
        for i in range(j, count, 8):
            r = work(s, i)
            if r.status_code >= 300: errs.append(r.text[:200])
    ts = [threading.Thread(target=worker, args=(j,)) for j in range(8)]
    [t.start() for t in ts]; [t.join() for t in ts]
    time.sleep(3)  # the watches take the last events
    subprocess.run(["callgrind_control", "-d", label, api], check=True, capture_output=True)
    if errs: print(f"{label}: {len(errs)} failed, first: {errs[0]}", file=sys.stderr)
def status_put(s, i):
    url = f"{ats}/namespaces/default/ats/b{i + 1}"
    o = s.get(url).json()
    o["status"] = {"phase": "PENDING"}
    return s.put(url + "/status", json=o)
def pod_post(s, i):
    return s.post(base + "/api/v1/namespaces/default/pods", json={"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"kind-{i}", "labels": {"app": "kind"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "busybox", "image": "busybox", "command": ["echo", str(i)]}]}})
def event_post(s, i):
    return s.post(base + "/api/v1/namespaces/default/events", json={"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"b{i}.kind"}, "involvedObject": {"kind": "At", "namespace": "default", "name": f"b{i + 1}"},
        "reason": "Profile", "message": f"event {i}", "type": "Normal", "source": {"component": "profile"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1})
# A status PUT needs a GET first: that GET is measured on its own.
run("get", lambda s, i: s.get(f"{ats}/namespaces/default/ats/b{i + 1}"))
run("status-put", status_put)
run("pod-post", pod_post)
run("event-post", event_post)
run("list", lambda s, i: s.get(f"{ats}/namespaces/default/ats"), 20)
PY
fi
for f in "$dir"/callgrind.out."$api".*; do
  label=$(awk '/^desc: Trigger:/{print $NF; exit}' "$f")
  total=$(awk '/^summary:|^totals:/{print $2; exit}' "$f")
  echo "$label $total $f"
done | sort -k3 >"$dir/dumps"
echo "dumps (label, instructions, file):"
cat "$dir/dumps"
echo "N=$N K=$K  files in $dir"
# The rows of docs/13's tables: inclusive instructions of a few functions, per At (the `at`
# dump) or per request (the others).
echo "per At or per request, in thousands of instructions:"
while read -r label _ file; do
  case $label in at) div=$N ;; list) div=20 ;; *) div=$K ;; esac
  callgrind_annotate --threshold=100 --inclusive=yes "$file" 2>/dev/null | python3 -c '
import re, sys
label, div = sys.argv[1], float(sys.argv[2])
rows = [("total", None),
        ("handler", r"embedded_apiserver::endpoints::handlers::serve_resource::\{\{closure\}\}$"),
        ("node", r"embedded_node::kubelet::run::\{\{closure\}\}$"),
        ("node sweep", r"embedded_node::(client::PodInformer::alive|logs::LogStore::(retain_existing|forget_gone))$"),
        ("managedFields", r"managed_fields::record_update$"),
        ("unknown fields", r"validation::check_unknown_fields$"),
        ("CRD validation", r"CustomResourceStrategy as .*Strategy>::validate$"),
        ("watch fan-out", r"endpoints::watch::WatchState::catch_up$"),
        ("shed", r"Store<Reg>::shed$")]
vals = {}
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(PROGRAM TOTALS|\S*?:(.*) \[)", line)
    if not m: continue
    v = int(m.group(1).replace(",", ""))
    if m.group(2) == "PROGRAM TOTALS": vals["total"] = v; continue
    for k, p in rows:
        if p and re.search(p, m.group(3)): vals[k] = vals.get(k, 0) + v
print(f"{label:>11}: " + ", ".join(f"{k} {vals.get(k, 0) / div / 1000:.0f}k" for k, _ in rows))
' "$label" "$div"
done <"$dir/dumps"
