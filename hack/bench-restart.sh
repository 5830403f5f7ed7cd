#!/usr/bin/env bash
# Restart benchmark of the embedded API server's --data-dir: how much memory the server takes
# when it comes back from `kill -9` with a large watch history, and while reflectors resume
# their watches from old resourceVersions and list again.
#
#   hack/bench-restart.sh                      # the release binary of this tree (built if missing)
#   BIN=/path/to/sample-controller hack/bench-restart.sh   # another build (e.g. main's)
#   HISTORY_MIB=100 hack/bench-restart.sh      # a smaller history (default 150 MiB)
#   SIMULATE=true hack/bench-restart.sh        # with the simulated node and controllers
#   SERVER_FLAGS="--history-max-bytes 64Mi" hack/bench-restart.sh   # more flags for the server
#
# What it does: starts `sample-controller apiserver --data-dir D` (plain HTTP on a free loopback
# port, no simulated controllers unless SIMULATE=true, history kept for an hour so nothing
# expires during the run), applies artifacts/crds/, then writes, from a few Python threads: ATS
# Ats (default 3,000), their status four times each, and ConfigMaps of 100 short keys each,
# created and updated until the server's `apiserver_storage_history_bytes` reaches HISTORY_MIB
# (the history charges objects written less than --rest-unread-after ago their trees, and
# rested ones their JSON, so the JSON the restart loads is less). It prints the server's
# VmHWM/VmRSS (from /proc/PID/status) next to the history's bytes, kills it with SIGKILL and
# starts it again on the same directory, then prints the same figures:
#
#   * `written`: before the kill (with how long the writes took: every write is committed to
#     the data directory before it is answered);
#   * `rested`: REST_WAIT seconds later (default 45: past the default --rest-unread-after of
#     30 s, so the objects written have rested as JSON), still before the kill;
#   * `loaded`: once /healthz answers after the restart (with how long that took);
#   * `replayed`: after two watches from the revision before the writes (Ats and ConfigMaps:
#     every change of the history is replayed), a watch of Ats with resourceVersion=0 (the
#     initial ADDED events), a plain LIST of each resource, a LIST with resourceVersion=0 and
#     a paged LIST (limit=500, from the revision before the writes), each read to its end;
#   * `settled`: REST_WAIT seconds later (what the replay decoded has rested again).
#
# VmHWM is the peak since the process started, so `loaded` and `replayed` show the peak of the
# load and of the replay. Needs python3 and kubectl. Nothing is asserted: the figures are the
# output (the tests of the apiserver crate assert the behaviour).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
target=${CARGO_TARGET_DIR:-$root/target}
bin=${BIN:-$target/release/sample-controller}
if [[ -z "${BIN:-}" && ! -x "$bin" ]]; then
    nice -n 10 env CARGO_BUILD_JOBS=1 cargo build --release --bin sample-controller >&2
fi
[[ -x "$bin" ]] || { echo "no binary at $bin" >&2; exit 1; }
command -v kubectl >/dev/null || { echo "bench-restart: kubectl is needed" >&2; exit 2; }

work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
pid=""
start_server() {
    "$bin" apiserver --plain-http --listen "127.0.0.1:$port" --simulate="${SIMULATE:-false}" \
        --data-dir "$work/data" --kubeconfig-out "$work/kc" --history-max-age 1h ${SERVER_FLAGS:-} \
        >>"$work/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do curl -fs "$base/healthz" >/dev/null 2>&1 && return; sleep 0.1; done
    echo "the server did not come up; its log:" >&2; tail -20 "$work/server.log" >&2; exit 1
}
cleanup() {
    if [[ -n "$pid" ]]; then kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
mem() { # LABEL
    local hwm rss hist changes
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    hist=$(curl -fs "$base/metrics" | awk '/^apiserver_storage_history_bytes / {print $2}')
    changes=$(curl -fs "$base/metrics" | awk '/^apiserver_storage_history_changes / {print $2}')
    printf '%-10s VmHWM %6d MiB  VmRSS %6d MiB  history %6.1f MiB (%s changes)  store.redb %d MiB\n' \
        "$1" $((hwm / 1024)) $((rss / 1024)) "$(echo "$hist" | awk '{print $1 / 1048576}')" "$changes" \
        $(($(stat -c %s "$work/data/store.redb") / 1048576))
}

echo "binary: $bin"
start_server
kubectl --kubeconfig "$work/kc" apply -f artifacts/crds/ >/dev/null
for _ in $(seq 100); do
    curl -fs "$base/apis/cnat.programming-kubernetes.info/v1/namespaces/default/ats" >/dev/null 2>&1 && break
    sleep 0.1
done

t0=$(date +%s.%N)
python3 - "$base" "${ATS:-3000}" "${HISTORY_MIB:-150}" >"$work/rv0" <<'EOF'
import json, sys, threading, urllib.request
base, n_ats, target = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) * 1048576
def req(method, path, body=None, ctype="application/json"):
    data = None if body is None else json.dumps(body).encode()
    r = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": ctype})
    with urllib.request.urlopen(r, timeout=60) as resp:
        return json.loads(resp.read())
def history_bytes():
    with urllib.request.urlopen(base + "/metrics", timeout=60) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("apiserver_storage_history_bytes "):
                return float(line.split()[1])
    return 0.0
rv0 = req("GET", "/api/v1/namespaces/default/configmaps")["metadata"]["resourceVersion"]
print(rv0)
ats = "/apis/cnat.programming-kubernetes.info/v1/namespaces/default/ats"
def par(f, items, k=6):
    items = list(items)
    ts = [threading.Thread(target=lambda j=j: [f(x) for x in items[j::k]]) for j in range(k)]
    [t.start() for t in ts]; [t.join() for t in ts]
par(lambda i: req("POST", ats, {"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
        "metadata": {"name": f"b{i}", "labels": {"app": "bench", "shard": str(i % 7)}},
        "spec": {"schedule": "2030-01-01T00:00:00Z", "run": {"command": f"echo {i}"}}}), range(n_ats))
for step, phase in enumerate(["PENDING", "RUNNING", "RUNNING", "DONE"]):
    par(lambda i: req("PATCH", f"{ats}/b{i}/status", {"status": {"phase": phase, "podName": f"b{i}-pod",
            "message": f"step {step}", "conditions": [{"type": "Ready", "status": "True", "reason": phase,
            "message": "m" * 40, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
            "application/merge-patch+json"), range(n_ats))
cms = "/api/v1/namespaces/default/configmaps"
def data(v):
    return {f"key-{k:03d}": f"value {k} version {v}" for k in range(100)}
n_cm, version = 0, 0
while history_bytes() < target:
    par(lambda i: req("POST", cms, {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"cm{i}", "labels": {"app": "bench"}}, "data": data(0)}),
        range(n_cm, n_cm + 500))
    n_cm += 500
    version += 1
    par(lambda i: req("PATCH", f"{cms}/cm{i}", {"data": data(version)}, "application/merge-patch+json"),
        range(n_cm))
EOF
rv0=$(cat "$work/rv0")
t1=$(date +%s.%N)
mem written
echo "  writes took $(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}') s"
sleep "${REST_WAIT:-45}"
mem rested
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
t0=$(date +%s.%N)
start_server
t1=$(date +%s.%N)
mem loaded
echo "  the restart took $(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}') s to answer /healthz"

t0=$(date +%s.%N)
python3 - "$base" "$rv0" <<'EOF'
import json, sys, threading, urllib.request
base, rv0 = sys.argv[1], sys.argv[2]
ats = "/apis/cnat.programming-kubernetes.info/v1/namespaces/default/ats"
cms = "/api/v1/namespaces/default/configmaps"
def req(method, path, body=None, ctype="application/json"):
    data = None if body is None else json.dumps(body).encode()
    r = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": ctype})
    with urllib.request.urlopen(r, timeout=300) as resp:
        return json.loads(resp.read())
# One write each after the restart: every watch reads until it has seen its resource's.
until = {ats: int(req("PATCH", f"{ats}/b0/status", {"status": {"message": "after restart"}},
                      "application/merge-patch+json")["metadata"]["resourceVersion"]),
         cms: int(req("PATCH", f"{cms}/cm0", {"data": {"after": "restart"}},
                      "application/merge-patch+json")["metadata"]["resourceVersion"])}
counts = {}
# A watch from resourceVersion=0 opens with one ADDED event per object, in key order.
live = {path: len(req("GET", path + "?limit=1")["items"]) + int(
            req("GET", path + "?limit=1")["metadata"].get("remainingItemCount", 0)) for path in (ats, cms)}
def watch(path, rv):
    n = 0
    with urllib.request.urlopen(f"{base}{path}?watch=1&resourceVersion={rv}&timeoutSeconds=600", timeout=600) as r:
        for line in r:
            ev = json.loads(line); n += 1
            if ev["type"] == "ERROR":
                raise SystemExit(f"watch {path} from {rv}: {ev}")
            if rv == "0" and n >= live[path]:
                break
            if rv != "0" and int(ev["object"]["metadata"]["resourceVersion"]) >= until[path]:
                break
    counts[f"watch {path.rsplit('/', 1)[1]} from {rv}"] = n
ws = [threading.Thread(target=watch, args=a) for a in [(ats, rv0), (cms, rv0), (ats, "0")]]
[t.start() for t in ws]; [t.join() for t in ws]
for path in (ats, cms):
    counts[f"list {path.rsplit('/', 1)[1]}"] = len(req("GET", path)["items"])
    counts[f"list {path.rsplit('/', 1)[1]} rv=0"] = len(req("GET", path + "?resourceVersion=0")["items"])
    n, cont = 0, ""
    while True:
        page = req("GET", f"{path}?limit=500&resourceVersion={rv0}" if not cont else f"{path}?limit=500&continue={cont}")
        n += len(page["items"]); cont = page["metadata"].get("continue", "")
        if not cont: break
    counts[f"paged list {path.rsplit('/', 1)[1]} at {rv0}"] = n
print("  " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
EOF
t1=$(date +%s.%N)
mem replayed
echo "  the watches and lists took $(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}') s"
sleep "${REST_WAIT:-45}"
mem settled
