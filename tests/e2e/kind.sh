#!/usr/bin/env bash
# End-to-end on kind: a kind cluster, both images loaded, the operator from its Helm chart, then
# the same end-to-end checks as on the real node (tests/node: the examples train to Succeeded, a
# pod or the operator's pod deleted mid-job, a cordoned node, a failing worker, Kueue...).
#
#   tests/e2e/kind.sh            # docker running: kind's docker provider and kindest/node;
#                                # else podman as root: kind's podman provider and a node image
#                                # the test bed assembles (tfjob_testbed.kind)
#   tests/e2e/kind.sh --check    # only say whether it can run here, and how
#
# Env: KEEP_CLUSTER=1 keeps the cluster; KIND_NODE_IMAGE picks the node image with docker
# (Kubernetes 1.28+); KIND_TESTS (tests/node) what pytest runs; CLUSTER (tfjob-e2e), TAG (the
# chart's appVersion), PYTHON (.venv/bin/python, with the project's test dependencies). It never
# touches your kubeconfig: kubectl and helm use a private one.
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER=${CLUSTER:-tfjob-e2e}
# The chart's appVersion: the tag the chart and manifests/examples/ use, so both run unchanged.
TAG=${TAG:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/tfjob-operator/Chart.yaml)}
PYTHON=${PYTHON:-.venv/bin/python}
KEEP_CLUSTER=${KEEP_CLUSTER:-0}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-}
KIND_TESTS=${KIND_TESTS:-tests/node}
OPERATOR_IMAGE=tfjob-operator/operator:$TAG
TRAINER_IMAGE=tfjob-operator/trainer:$TAG

log() { printf '==> %s\n' "$*"; }
die() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  provider=docker
elif command -v podman >/dev/null 2>&1 && [ "$(id -u)" = 0 ] &&
  "$PYTHON" -c 'import tfjob_testbed' >/dev/null 2>&1; then
  provider=podman
else
  echo "SKIP: kind e2e needs a running docker daemon, or podman as root with the test bed (make venv)"
  exit 0
fi
if [ "$provider" = docker ]; then
  missing=""
  for tool in kind kubectl helm; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing, $tool"
  done
  if [ -n "$missing" ]; then
    echo "SKIP: kind e2e with docker needs kind, kubectl and helm (missing: ${missing#, })"
    exit 0
  fi
fi
if [ "${1:-}" = --check ]; then
  echo "ready: kind on $provider"
  exit 0
fi

if [ "$provider" = podman ]; then
  # The bed builds kind, the node image and both images, makes the cluster, installs the chart,
  # and on the way out deletes it and checks that nothing of it is left.
  finish_bed() {
    local rc=$?
    if [ "$KEEP_CLUSTER" = 1 ]; then
      log "keeping kind cluster $CLUSTER (kubeconfig: ${kubeconfig:-none}); delete it with: $PYTHON -m tfjob_testbed.kind.kind_cluster down --name $CLUSTER"
    elif ! "$PYTHON" -m tfjob_testbed.kind.kind_cluster down --name "$CLUSTER"; then
      rc=1
    fi
    if [ "$rc" -eq 0 ]; then log "PASS: kind e2e (podman)"; fi
    exit "$rc"
  }
  trap finish_bed EXIT
  log "kind cluster $CLUSTER on podman, node image assembled by the test bed"
  addons=--addons
  case "$KIND_TESTS" in *::*) addons="" ;; esac
  kubeconfig=$("$PYTHON" -m tfjob_testbed.kind.kind_cluster up --name "$CLUSTER" $addons)
  log "end-to-end checks: pytest $KIND_TESTS"
  set -f # KIND_TESTS may name several tests, and [params] are not globs
  # shellcheck disable=SC2086
  TFJOB_E2E_KUBECONFIG="$kubeconfig" "$PYTHON" -m pytest $KIND_TESTS -v -p no:cacheprovider
  exit 0
fi

WORK=$(mktemp -d)
export KUBECONFIG="$WORK/kubeconfig"

diagnose() {
  kubectl get tfjobs,statefulsets,services,pvc,pods -A -o wide || true
  kubectl describe tfjobs -A || true
  local pod
  for pod in $(kubectl get pods -n tfjob-system -o name 2>/dev/null); do
    echo "--- $pod (operator)"
    kubectl logs -n tfjob-system "$pod" --tail=100 || true
  done
  kubectl get pods -A --no-headers 2>/dev/null | grep -v -e '^kube-system ' -e '^tfjob-system ' |
    while read -r ns pod _; do
      echo "--- $ns/$pod"
      kubectl logs -n "$ns" "$pod" --all-containers --tail=30 || true
    done
}

finish() {
  local rc=$?
  if [ "$rc" -ne 0 ] && [ -s "$KUBECONFIG" ]; then
    log "diagnostics"
    diagnose
  fi
  if [ "$KEEP_CLUSTER" = 1 ]; then
    log "keeping kind cluster $CLUSTER (kind export kubeconfig --name $CLUSTER)"
  else
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
  if [ "$rc" -eq 0 ]; then log "PASS: kind e2e"; fi
  exit "$rc"
}
trap finish EXIT

log "kind cluster $CLUSTER"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  reused=1
else
  reused=0
  kind create cluster --name "$CLUSTER" --wait 120s ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
fi
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
version=$(kubectl get nodes -o jsonpath='{.items[0].status.nodeInfo.kubeletVersion}')
minor=${version#v1.}
minor=${minor%%.*}
# TF_CONFIG's task index comes from the apps.kubernetes.io/pod-index label (1.28+).
[ "$minor" -ge 28 ] || die "node is Kubernetes $version; need 1.28+: set KIND_NODE_IMAGE or upgrade kind"

log "building $OPERATOR_IMAGE and $TRAINER_IMAGE"
tf_package=tensorflow-cpu # has no arm64 wheel; `tensorflow` is the CPU build there
case "$(docker info --format '{{.Architecture}}')" in aarch64 | arm64) tf_package=tensorflow ;; esac
docker build --target operator -t "$OPERATOR_IMAGE" .
docker build --target trainer --build-arg TF_PACKAGE="$tf_package" -t "$TRAINER_IMAGE" \
  -t "$TRAINER_IMAGE-gpu" .
kind load docker-image --name "$CLUSTER" "$OPERATOR_IMAGE" "$TRAINER_IMAGE" "$TRAINER_IMAGE-gpu"

log "operator from charts/tfjob-operator"
helm upgrade --install tfjob-operator charts/tfjob-operator \
  --namespace tfjob-system --create-namespace \
  --set image.repository=tfjob-operator/operator --set image.tag="$TAG" \
  --set image.pullPolicy=IfNotPresent --wait --timeout 5m
if [ "$reused" = 1 ]; then # same tag, new image: restart to pick it up
  for deploy in $(kubectl get deployments -n tfjob-system -o name); do
    kubectl rollout restart -n tfjob-system "$deploy"
    kubectl rollout status -n tfjob-system "$deploy" --timeout=3m
  done
fi
kubectl wait --for=condition=Established crd/tfjobs.tfjob.dev --timeout=60s

# The node advertises GPUs as the real-node bed's does (the documented way for extended
# resources), so the GPU example schedules; it runs on the CPU image tagged -gpu.
node=$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')
kubectl patch node "$node" --subresource=status --type=merge \
  -p '{"status":{"capacity":{"nvidia.com/gpu":"2"}}}'

# The same end-to-end checks as on the real node (tests/node), through this cluster's kubeconfig;
# the tests that inject faults on the real node's host skip here.
log "end-to-end checks: pytest $KIND_TESTS"
set -f # KIND_TESTS may name several tests, and [params] are not globs
# shellcheck disable=SC2086
TFJOB_E2E_KUBECONFIG="$KUBECONFIG" "$PYTHON" -m pytest $KIND_TESTS -v -p no:cacheprovider
