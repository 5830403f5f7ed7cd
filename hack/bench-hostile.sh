#!/usr/bin/env bash
# Hostile-input benchmark of the embedded API server (issue 39): starts the release
# `sample-controller apiserver` on loopback, replays payloads that once took the process to
# gigabytes or held it for a minute, and prints for each: the answer's status code, how long it
# took, the server's peak RSS while it ran (VmHWM, reset before each payload) and the worst
# latency a fresh client's GET saw meanwhile (a new curl process, a new connection, every 50 ms).
#
#   hack/bench-hostile.sh            # builds the release binary if missing
#   hack/bench-hostile.sh --build    # rebuilds it first
#
# Needs curl and python3. Regressions show as numbers: a payload whose time, RSS or probe
# latency jumps is the one to look at. Nothing here is asserted; the apiserver crate's
# tests/hostile.rs asserts the answers.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
target=${CARGO_TARGET_DIR:-$root/target}
if [[ "${1:-}" == "--build" || -z "$(find "$target/release" -maxdepth 1 -type f -name sample-controller 2>/dev/null)" ]]; then
    cargo build --release >&2
fi
bin=$(find "$target/release" -maxdepth 1 -type f -name sample-controller | head -1)
[[ -x "$bin" ]] || { echo "no sample-controller binary under $target/release" >&2; exit 1; }

work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
start_server() { # extra flags of the apiserver command
    "$bin" apiserver --plain-http --listen "127.0.0.1:$port" --simulate=false "$@" >>"$work/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -fs "$base/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
}
stop_server() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
cleanup() { stop_server; rm -rf "$work"; }
trap cleanup EXIT
start_server

# --- payloads -----------------------------------------------------------------------------------
python3 - "$work" <<'EOF'
import json, sys
w = sys.argv[1]
def put(name, text):
    with open(f"{w}/{name}", "w") as f:
        f.write(text)
cm = lambda name, **kw: json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **kw})
put("seed.json", cm("seed", data={"a": "x" * 1000}))
put("copy20.json", json.dumps([{"op": "copy", "from": "/data", "path": f"/data/k{i}"} for i in range(20)]))
put("ops10001.json", json.dumps([{"op": "test", "path": "/metadata/name", "value": "seed"}] * 10001))
put("deep.yaml", "apiVersion: authorization.k8s.io/v1\nkind: SelfSubjectAccessReview\nspec: " + "[" * 100000 + "]" * 100000 + "\n")
put("deep999.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\ndata: " + "[" * 999 + "]" * 999 + "\n")
bomb = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\nx0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
for i in range(1, 10):
    bomb += f"x{i}: &x{i} [" + ", ".join([f"*x{i-1}"] * 10) + "]\n"
put("bomb.yaml", bomb)
put("owners.json", '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owned","ownerReferences":[' + ",".join(["{}"] * 1000000) + "]}}")
put("cm37.json", cm("cm37", data={"a": "x" * 3_700_000}))
put("cm11.json", cm("cm11", data={"a": "x" * 1_100_000}))
put("lease16.json", json.dumps({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "big"}, "spec": {"holderIdentity": "x" * 1_600_000}}))
put("typed.json", json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typed", "annotations": {"a": {"b": 1}}, "labels": {"x": 5}}, "data": {"k": {"o": 1}}}))
EOF

cms="$base/api/v1/namespaces/default/configmaps"
curl -fs -o /dev/null -X POST -H 'Content-Type: application/json' --data-binary @"$work/seed.json" "$cms"

# The probe: a fresh client (new process, new connection) GETs a configmap every 50 ms and the
# worst latency is kept, until the file "stop" appears.
probe() {
    local worst=0 t
    while [[ ! -e "$work/stop" ]]; do
        t=$(curl -s -o /dev/null -m 30 -w '%{time_total}' "$cms/seed" || echo 30)
        worst=$(python3 -c "print(max($worst, $t))")
        sleep 0.05
    done
    echo "$worst" >"$work/probe"
}

peak_mib() { awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status"; }

printf '%-44s %5s %9s %12s %14s\n' payload code seconds "peak RSS MiB" "probe GET max s"
run() { # name method path content-type file
    local name=$1 method=$2 path=$3 ctype=$4 file=$5 out code secs
    echo 5 >"/proc/$pid/clear_refs" 2>/dev/null || true   # resets VmHWM to the current RSS
    rm -f "$work/stop" "$work/probe"
    probe &
    local probe_pid=$!
    out=$(curl -s -o "$work/answer" -m 120 -w '%{http_code} %{time_total}' -X "$method" \
        -H "Content-Type: $ctype" --data-binary @"$work/$file" "$base$path" || echo "000 120")
    sleep 0.2
    touch "$work/stop"
    wait "$probe_pid"
    read -r code secs <<<"$out"
    printf '%-44s %5s %9.3f %12s %14.3f\n' "$name" "$code" "$secs" "$(peak_mib)" "$(cat "$work/probe")"
}

ns=/api/v1/namespaces/default
run "json-patch: 20 doubling copies"               PATCH "$ns/configmaps/seed"              application/json-patch+json copy20.json
run "json-patch: 20 doubling copies, dryRun=All"   PATCH "$ns/configmaps/seed?dryRun=All"   application/json-patch+json copy20.json
run "json-patch: 10,001 operations"                PATCH "$ns/configmaps/seed"              application/json-patch+json ops10001.json
run "YAML 100k deep to selfsubjectaccessreviews"   POST  /apis/authorization.k8s.io/v1/selfsubjectaccessreviews application/yaml deep.yaml
run "YAML 999 deep ConfigMap (the depth limit)"    POST  "$ns/configmaps"                   application/yaml deep999.yaml
run "YAML alias bomb (10^10 strings)"              POST  "$ns/configmaps"                   application/yaml bomb.yaml
run "1M empty ownerReferences (2.9 MiB)"           POST  "$ns/configmaps"                   application/json owners.json
run "ConfigMap of 3.7 MB (body limit)"             POST  "$ns/configmaps"                   application/json cm37.json
run "ConfigMap of 1.1 MB data"                     POST  "$ns/configmaps"                   application/json cm11.json
run "Lease of 1.6 MB (etcd request limit)"         POST  /apis/coordination.k8s.io/v1/namespaces/default/leases application/json lease16.json
run "wrongly typed annotations/labels/data"        POST  "$ns/configmaps"                   application/json typed.json

# A scenario that is not one request: `setup` runs first (not measured), then `body` runs while
# the probe measures and VmHWM is watched; its exit status is ignored, its last line printed.
run_scenario() { # name body-function
    local name=$1 body=$2 t0 t1 note
    echo 5 >"/proc/$pid/clear_refs" 2>/dev/null || true
    rm -f "$work/stop" "$work/probe"
    probe &
    local probe_pid=$!
    t0=$(date +%s.%N)
    note=$("$body" 2>&1 | tail -1 || true)
    t1=$(date +%s.%N)
    touch "$work/stop"
    wait "$probe_pid"
    printf '%-44s %5s %9.3f %12s %14.3f  %s\n' "$name" "-" "$(python3 -c "print($t1 - $t0)")" "$(peak_mib)" "$(cat "$work/probe")" "$note"
}

# Row 4: a CRD whose pattern is `^[\w.-]{1,253}$` (huge with Unicode classes, small as RE2's
# ASCII ones), then 100 custom resources written against it.
crd='{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com"},"spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{"word":{"type":"string","pattern":"^[\\w.-]{1,253}$"}}}}}}}]}}'
curl -s -o /dev/null -X POST -H 'Content-Type: application/json' --data-binary "$crd" "$base/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
sleep 0.5
crs() {
    local i ok=0
    for i in $(seq 100); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
            --data-binary "{\"apiVersion\":\"example.com/v1\",\"kind\":\"Widget\",\"metadata\":{\"name\":\"w$i\"},\"spec\":{\"word\":\"value-$i.x\"}}" \
            "$base/apis/example.com/v1/namespaces/default/widgets")
        [[ "$code" == 201 ]] && ok=$((ok + 1))
    done
    echo "$ok/100 created"
}
run_scenario "100 CRs against ^[\\w.-]{1,253}\$" crs

# Row 7: 15,000 TCP connections that never send a byte (the shell's descriptor limit allows no
# more), held while the probe runs; the server caps connections at 10,000 and sheds the oldest
# silent ones for newcomers.
idle() {
    python3 - "$port" <<'PY'
import socket, sys, time
port = int(sys.argv[1]); held = []
for _ in range(15000):
    try:
        held.append(socket.create_connection(("127.0.0.1", port)))
    except OSError:
        break
time.sleep(3)
print(f"{len(held)} idle connections opened and held 3 s")
PY
}
run_scenario "15,000 idle connections" idle

echo "idle RSS after the run: $(awk '/VmRSS/ {printf "%.1f MiB", $2/1024}' "/proc/$pid/status")"

# Memory after a burst, on a fresh server (the payloads above leave memory of their own):
# 10,000 At custom objects (artifacts/crds/) created over keep-alive connections, then 60 s
# without a write. Prints the RSS before the burst, the RSS after the idle minute, and the live
# data: the bytes of the objects as a LIST serves them. The figure to watch is the RSS growth
# against the live data. Run twice: with --rest-unread-objects=false (every object kept as a
# decoded tree), and as the server runs by default (objects unread for 30 s kept as JSON bytes).
burst() { # extra flags of the apiserver command
stop_server
start_server "$@"
rss_mib() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status"; }
curl -s -o /dev/null -X POST -H 'Content-Type: application/yaml' \
    --data-binary @"$root/artifacts/crds/ats.cnat.programming-kubernetes.info.yaml" \
    "$base/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ats=/apis/cnat.programming-kubernetes.info/v1/namespaces/default/ats
for _ in $(seq 100); do [[ "$(curl -s -o /dev/null -w '%{http_code}' "$base$ats")" == 200 ]] && break; sleep 0.1; done
before=$(rss_mib)
python3 - "$port" "$ats" >"$work/burst" <<'PY'
import http.client, json, sys, threading
port, path = int(sys.argv[1]), sys.argv[2]
def post(lo, hi):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(lo, hi):
        body = json.dumps({"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
                           "metadata": {"name": f"at-{i:05d}", "labels": {"bench": "burst"}},
                           "spec": {"schedule": "2030-01-01T00:00:00Z",
                                    "run": {"command": f"echo burst {i}", "image": "busybox"}}})
        c.request("POST", path, body, {"Content-Type": "application/json"})
        r = c.getresponse(); r.read()
        assert r.status == 201, (r.status, i)
threads = [threading.Thread(target=post, args=(k * 1000, (k + 1) * 1000)) for k in range(10)]
for t in threads: t.start()
for t in threads: t.join()
c = http.client.HTTPConnection("127.0.0.1", port)
c.request("GET", path); r = c.getresponse(); listed = json.loads(r.read())
live = sum(len(json.dumps(o, separators=(",", ":"))) for o in listed["items"])
print(len(listed["items"]), live)
PY
read -r count live <"$work/burst"
after_burst=$(rss_mib)
sleep 60
idle=$(rss_mib)
python3 - "$count" "$live" "$before" "$after_burst" "$idle" "$*" <<'PY'
import sys
count, live = int(sys.argv[1]), int(sys.argv[2]) / 2**20
before, burst, idle = map(float, sys.argv[3:6])
flags = sys.argv[6]
print(f"{count} At objects{' (' + flags + ')' if flags else ''}: live data {live:.1f} MiB; RSS {before:.1f} MiB before, "
      f"{burst:.1f} MiB after the burst, {idle:.1f} MiB after 60 s idle: "
      f"growth {idle - before:.1f} MiB = {(idle - before) / live:.2f}x the live data")
PY
}
burst --rest-unread-objects=false
burst
