#!/usr/bin/env bash
# Runs the At controller in minikube, end to end, the way a user deploys it:
#
#   1. builds the image inside minikube's Docker daemon (no registry needed),
#   2. applies the CRDs and artifacts/deploy/ (namespace, RBAC, the 2-replica Deployment),
#   3. applies the book's example At with its schedule moved a few seconds ahead,
#   4. waits for the At to reach DONE and prints its pod's log (the book's "YAY"),
#   5. cleans up everything it created (pass --keep to leave it running).
#
# Needs: minikube, kubectl, docker (the client; the daemon is minikube's).
# Environment: DELAY (seconds until the At is due, default 15), TIMEOUT (kubectl wait, default 180s).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

KEEP=false
for arg in "$@"; do
  case "$arg" in
    --keep) KEEP=true ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "minikube.sh: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

DELAY="${DELAY:-15}"
TIMEOUT="${TIMEOUT:-180s}"
IMAGE="sample-controller:dev"
AT_NS="cnat"
AT_NAME="example-at"
CONTROLLER_NS="sample-controller"

for tool in minikube kubectl docker; do
  command -v "$tool" >/dev/null || { echo "minikube.sh: $tool is not on PATH" >&2; exit 1; }
done

step() { printf '\n==> %s\n' "$*"; }

cleanup() {
  if [[ "$KEEP" == true ]]; then
    step "leaving everything in place (--keep); remove it with: kubectl delete ns $AT_NS; kubectl delete -k artifacts/deploy/; kubectl delete -f artifacts/crds/"
    return
  fi
  step "cleaning up"
  kubectl delete namespace "$AT_NS" --ignore-not-found --wait=false
  kubectl delete -k artifacts/deploy/ --ignore-not-found
  kubectl delete -f artifacts/crds/ --ignore-not-found
}

step "starting minikube (if it is not running)"
minikube status >/dev/null 2>&1 || minikube start

step "building $IMAGE inside minikube's Docker"
eval "$(minikube docker-env)"
docker build -t "$IMAGE" .

trap cleanup EXIT

step "installing the CRDs"
kubectl apply -f artifacts/crds/
kubectl wait --for=condition=Established --timeout=60s -f artifacts/crds/

step "deploying the controller (namespace, RBAC, Deployment)"
kubectl apply -k artifacts/deploy/
kubectl -n "$CONTROLLER_NS" rollout status deployment/sample-controller --timeout="$TIMEOUT"

# GNU date first, then BSD/macOS date.
due="$(date -u -d "+${DELAY} seconds" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null \
  || date -u -v "+${DELAY}S" +%Y-%m-%dT%H:%M:%SZ)"

step "applying the book's example At, due at $due"
kubectl create namespace "$AT_NS" --dry-run=client -o yaml | kubectl apply -f -
sed -e "s/^\([[:space:]]*schedule:\).*/\1 \"$due\"/" artifacts/examples/cnat-example.yaml \
  | kubectl -n "$AT_NS" apply -f -
kubectl -n "$AT_NS" get ats

step "waiting for $AT_NAME to reach DONE"
kubectl -n "$AT_NS" wait --for=jsonpath='{.status.phase}'=DONE "at/$AT_NAME" --timeout="$TIMEOUT"
kubectl -n "$AT_NS" get ats
kubectl -n "$AT_NS" get events --field-selector "involvedObject.name=$AT_NAME"

step "the pod's log"
log="$(kubectl -n "$AT_NS" logs "$AT_NAME-pod")"
echo "$log"
if [[ "$log" != "YAY" ]]; then
  echo "minikube.sh: expected the pod to print YAY, got: $log" >&2
  exit 1
fi
step "done: the At ran its command once, at its schedule"
