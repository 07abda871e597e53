#!/usr/bin/env bash
# End-to-end on a real cluster: build both images, run the operator from its Helm chart on kind,
# train manifests/examples/mnist-ps.yaml to Succeeded, check its checkpoint and cleanup, then
# check that a worker exiting 1 fails its job with exit code 1.
#
#   tests/e2e/kind.sh            # needs docker (running), kind, kubectl, helm
#   tests/e2e/kind.sh --check    # only say whether it can run here
#
# Env: KEEP_CLUSTER=1 keeps the cluster; KIND_NODE_IMAGE picks the node image (Kubernetes 1.28+);
# CLUSTER (tfjob-e2e), TAG (dev). It never touches your kubeconfig: kubectl and helm use a
# private one.
set -euo pipefail

CLUSTER=${CLUSTER:-tfjob-e2e}
TAG=${TAG:-dev}
KEEP_CLUSTER=${KEEP_CLUSTER:-0}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-}
NS=tfjob-e2e
OPERATOR_IMAGE=tfjob-operator/operator:$TAG
TRAINER_IMAGE=tfjob-operator/trainer:$TAG
TRAINER_ARGS=(--steps 200 --dataset digits)

log() { printf '==> %s\n' "$*"; }
die() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

missing=""
for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null 2>&1 || missing="$missing, $tool"
done
if command -v docker >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
  missing="$missing, a running docker daemon"
fi
if [ -n "$missing" ]; then
  echo "SKIP: kind e2e needs docker, kind, kubectl and helm (missing: ${missing#, })"
  exit 0
fi
if [ "${1:-}" = --check ]; then
  echo "ready: docker, kind, kubectl and helm are here"
  exit 0
fi

cd "$(dirname "$0")/../.."
WORK=$(mktemp -d)
export KUBECONFIG="$WORK/kubeconfig"

diagnose() {
  kubectl get tfjobs,statefulsets,services,pvc,pods -n "$NS" -o wide || true
  kubectl describe tfjobs -n "$NS" || true
  local pod
  for pod in $(kubectl get pods -n tfjob-system -o name 2>/dev/null); do
    echo "--- $pod (operator)"
    kubectl logs -n tfjob-system "$pod" --tail=100 || true
  done
  for pod in $(kubectl get pods -n "$NS" -o name 2>/dev/null); do
    echo "--- $pod"
    kubectl logs -n "$NS" "$pod" --all-containers --tail=30 || true
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

# wait_gone SECONDS WHAT KUBECTL-GET-ARGS...: until `kubectl get` lists nothing.
wait_gone() {
  local deadline=$((SECONDS + $1)) what=$2 names
  shift 2
  while :; do
    names=$(kubectl get "$@" -o name) || die "kubectl get $* failed"
    [ -z "$names" ] && return 0
    [ "$SECONDS" -lt "$deadline" ] || die "$what still there after $1s: $(echo "$names" | tr '\n' ' ')"
    sleep 3
  done
}

# wait_job NAME CONDITION SECONDS: until the TFJob has CONDITION; fail at once on the other end.
wait_job() {
  local name=$1 want=$2 deadline=$((SECONDS + $3)) conds shown=""
  while :; do
    conds=" $(kubectl get tfjob "$name" -n "$NS" \
      -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}')"
    if [ "$conds" != "$shown" ]; then
      log "tfjob/$name:$conds"
      shown=$conds
    fi
    case "$conds" in *" $want "*) return 0 ;; esac
    case "$conds" in *" Succeeded "* | *" Failed "*) die "tfjob/$name ended, not $want" ;; esac
    [ "$SECONDS" -lt "$deadline" ] || die "tfjob/$name not $want after $3s"
    sleep 5
  done
}

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
docker build --target trainer --build-arg TF_PACKAGE="$tf_package" -t "$TRAINER_IMAGE" .
kind load docker-image --name "$CLUSTER" "$OPERATOR_IMAGE" "$TRAINER_IMAGE"

log "operator from charts/tfjob-operator"
helm upgrade --install tfjob-operator charts/tfjob-operator \
  --namespace tfjob-system --create-namespace \
  --set image.repository=tfjob-operator/operator --set image.tag="$TAG" \
  --set image.pullPolicy=Never --wait --timeout 5m
if [ "$reused" = 1 ]; then # same tag, new image: restart to pick it up
  for deploy in $(kubectl get deployments -n tfjob-system -o name); do
    kubectl rollout restart -n tfjob-system "$deploy"
    kubectl rollout status -n tfjob-system "$deploy" --timeout=3m
  done
fi
kubectl wait --for=condition=Established crd/tfjobs.tfjob.dev --timeout=60s

kubectl delete namespace "$NS" --ignore-not-found --wait=true --timeout=3m # a reused cluster's
kubectl create namespace "$NS"

# The example as written, with our trainer image (loaded by kind, never pulled) and a short run
# appended to the args of each replica's TensorFlow container (the one named `tensorflow`, or
# the only one, as the operator picks it; argparse lets the last flag win). Edited with PyYAML from the
# operator image we just built, so this needs no yq or Python on the host.
edit='
import sys, yaml
image, namespace, *extra = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
changed = 0
for doc in docs:
    if doc.get("kind") != "TFJob":
        continue
    doc["metadata"]["namespace"] = namespace
    for replica in doc["spec"]["tfReplicaSpecs"].values():
        containers = replica["template"]["spec"]["containers"]
        named = [c for c in containers if c.get("name") == "tensorflow"]
        for c in named or (containers if len(containers) == 1 else []):
            c["image"], c["imagePullPolicy"] = image, "Never"
            c["args"] = [*(c.get("args") or []), *extra]
            changed += 1
if not changed:
    sys.exit("no TFJob container to run the trainer in, in the example")
yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
'
docker run --rm -i --entrypoint python "$OPERATOR_IMAGE" -c "$edit" \
  "$TRAINER_IMAGE" "$NS" "${TRAINER_ARGS[@]}" \
  <manifests/examples/mnist-ps.yaml >"$WORK/mnist-ps.yaml"

log "mnist-ps: train to Succeeded"
kubectl apply -n "$NS" -f "$WORK/mnist-ps.yaml"
wait_job mnist-ps Succeeded 900
exit_code=$(kubectl get tfjob mnist-ps -n "$NS" -o jsonpath='{.status.failure.exitCode}')
[ -z "$exit_code" ] || die "mnist-ps succeeded with status.failure.exitCode=$exit_code"

# cleanPodPolicy Running (the default) scales every StatefulSet to 0 when the job ends.
wait_gone 180 "mnist-ps parameter server pods" pods -n "$NS" \
  -l tfjob.dev/job-name=mnist-ps,tfjob.dev/replica-type=ps

log "mnist-ps: a checkpoint on its volume"
claim=$(kubectl get tfjob mnist-ps -n "$NS" -o jsonpath='{.spec.checkpoint.claimName}')
claim=${claim:-mnist-ps-checkpoints}
kubectl apply -n "$NS" -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: mnist-ps-checkpoint-check
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 65532, runAsGroup: 65532, runAsNonRoot: true}
  containers:
  - name: check
    image: $TRAINER_IMAGE
    imagePullPolicy: Never
    command:
    - python
    - -c
    - |
      import glob, os, sys
      print(sorted(os.listdir("/ckpt")))
      ok = os.path.exists("/ckpt/checkpoint") and glob.glob("/ckpt/ckpt-*.index")
      sys.exit(0 if ok else "no checkpoint file or ckpt-*.index on the volume")
    volumeMounts: [{name: ckpt, mountPath: /ckpt, readOnly: true}]
  volumes:
  - name: ckpt
    persistentVolumeClaim: {claimName: $claim, readOnly: true}
EOF
deadline=$((SECONDS + 180))
until phase=$(kubectl get pod mnist-ps-checkpoint-check -n "$NS" -o jsonpath='{.status.phase}') &&
  { [ "$phase" = Succeeded ] || [ "$phase" = Failed ]; }; do
  [ "$SECONDS" -lt "$deadline" ] || die "checkpoint check pod still ${phase:-pending} after 180s"
  sleep 3
done
kubectl logs -n "$NS" mnist-ps-checkpoint-check
[ "$phase" = Succeeded ] || die "no checkpoint on $claim"
kubectl delete pod mnist-ps-checkpoint-check -n "$NS" --wait=true

log "mnist-ps: deleting the job takes its children with it"
kubectl delete tfjob mnist-ps -n "$NS" --wait=true --timeout=2m
wait_gone 120 "mnist-ps children" statefulsets,services,pvc -n "$NS" -l tfjob.dev/job-name=mnist-ps

log "e2e-fail: a worker that exits 1 under restartPolicy Never"
kubectl apply -n "$NS" -f - <<EOF
apiVersion: tfjob.dev/v1
kind: TFJob
metadata:
  name: e2e-fail
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: tensorflow
            image: $TRAINER_IMAGE
            imagePullPolicy: Never
            command: [python, -c, "import sys; sys.exit(1)"]
EOF
wait_job e2e-fail Failed 300
exit_code=$(kubectl get tfjob e2e-fail -n "$NS" -o jsonpath='{.status.failure.exitCode}')
[ "$exit_code" = 1 ] || die "e2e-fail: status.failure.exitCode is '$exit_code', want 1"
kubectl delete tfjob e2e-fail -n "$NS" --wait=true --timeout=2m
