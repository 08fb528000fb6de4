#!/bin/bash
# Priorities and preemption on a real control plane: ../shared/k8s-harness's kube-apiserver,
# kube-controller-manager, FrameworkController and real node (kubelet, containerd, CNI,
# kube-scheduler; 2 CPUs), with the real Kueue v0.19.2 (start-kueue.sh; its ClusterQueue cq
# set here to the node's 2 CPUs) and the classes of priorities.sh (prod 1000, test 100,
# oppo 10, as PriorityClasses and Kueue WorkloadPriorityClasses; cq preempts lower ones
# within itself), and `rest-lite serve` on this machine (the checkout's debug build). The
# pods really run, in the harness's images. CI cannot build Kueue; run by hand:
#
#   cargo build -p rest-lite --bin rest-lite
#   K8S_HARNESS=~/.k8s-harness HARNESS_SCRIPTS=../shared/k8s-harness rest-lite/tests/real_cluster/priorities.sh [CASE...]
#
# Needs localhost/kube-runtime:0.1.0 (build-runtime-image.sh after cargo build --release).
# Cases (all by default):
#   kueue-preempt  an oppo job of two 1-CPU tasks placed whole and running (cq full), then a
#                  prod job of the same size: the prod job placed whole within 60 s, the oppo
#                  job WAITING (never FAILED, jobRetryCount 0), placed whole again once the
#                  prod job ends, and SUCCEEDED; its first attempt's end names Kueue's
#                  preemption
#   drain          `kubectl drain` of the node under a running job: WAITING in the scheduler's
#                  words while the node is cordoned (never FAILED, jobRetryCount 0), placed
#                  again after `kubectl uncordon`, SUCCEEDED; the attempt's end names the
#                  eviction
#   volcano-preempt  the real Volcano v1.7.0 (start-volcano.sh) on its two fake nodes, here of
#                  3 CPUs each (fake-kubelet.sh plays their kubelet: the pods do not run), with
#                  the scheduler configuration of docs/operating.md ("Priorities and
#                  preemption"): an oppo job of six 1-CPU tasks placed whole and running, then
#                  a prod job of the same size; as kueue-preempt, the oppo job's first attempt
#                  naming Volcano's eviction
set -euo pipefail
H=${K8S_HARNESS:?K8S_HARNESS: the harness directory}
S=${HARNESS_SCRIPTS:?HARNESS_SCRIPTS: the harness scripts directory}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
R=${REST_LITE:-$ROOT/target/debug/rest-lite}
export KUBECONFIG=$H/kubeconfig PATH=$H/bin:$PATH K8S_HARNESS=$H
WORK=$ROOT/target/real-cluster-priorities
rm -rf "$WORK" && mkdir -p "$WORK"
CASES=${*:-kueue-preempt drain volcano-preempt}
PORT=19472
SERVER=http://127.0.0.1:$PORT
NODE=real-node-1

say() { echo "=== $(date -u +%T) $*"; }
# After a pipe, `grep >/dev/null` and `sed -n 1p`, never `grep -q` or `head -1` (SIGPIPE
# under pipefail).
fail() {
  echo "FAILED: $*" >&2
  echo "--- server log (tail)" >&2; tail -n 30 "$WORK/serve.log" >&2 || true
  kubectl get pods,workloads.kueue.x-k8s.io -A -o wide 2>&1 | tail -n 20 >&2 || true
  kubectl uncordon "$NODE" >/dev/null 2>&1 || true
  stop_server
  exit 1
}
rl() { REST_LITE_STATE_DIR=$WORK/state "$R" "$@" --server "$SERVER"; }
state() { rl jobs 2>/dev/null | awk -v j="$1" '$1==j {print $3}'; }
is_state() { [ "$(state "$1")" = "$2" ]; }
until_true() {
  local limit=$1 what=$2 start=$SECONDS; shift 2
  until "$@" >/dev/null 2>&1; do
    [ $((SECONDS - start)) -lt "$limit" ] || fail "$what (not within $limit s)"
    sleep 1
  done
  echo "  $what: $((SECONDS - start)) s"
}
status_json() { rl status "$1" -o json; }
field() { status_json "$1" | python3 -c "import json,sys; v=json.load(sys.stdin); print($2)"; }
waiting_says() { rl status "$1" | grep -E "^waiting for" | sed -n 1p; }
says() { waiting_says "$1" | grep >/dev/null "$2"; }
# Every state job $1 showed, one a second, into $WORK/$1.states, until killed.
watch_states() { while :; do state "$1" >>"$WORK/$1.states" 2>/dev/null || true; sleep 1; done; }
never_failed() {
  ! grep -x >/dev/null FAILED "$WORK/$1.states" || fail "$1 was FAILED at some point"
}

start_server() { # ENGINE
  local gang=""
  [ "$1" = none ] || gang="gang: {engine: $1, defaultQueue: vc1}"
  cat >"$WORK/config.yaml" <<EOF
namespace: default
runtimeImage: localhost/kube-runtime:0.1.0
runtimeImagePullPolicy: Never
kubeApiserverAddress: https://198.18.0.1:6443
terminationGracePeriodSec: 10
$gang
EOF
  REST_LITE_STATE_DIR=$WORK/state setsid "$R" serve --backend kube --kubeconfig "$KUBECONFIG" \
    --config "$WORK/config.yaml" --listen "127.0.0.1:$PORT" >>"$WORK/serve.log" 2>&1 &
  echo $! >"$WORK/serve.pid"
  until_true 30 "server up" rl jobs
}
stop_server() { [ ! -f "$WORK/serve.pid" ] || kill "$(cat "$WORK/serve.pid")" 2>/dev/null || true; sleep 1; }
# However the script ends, no server of it is left (nor one an earlier run left).
trap stop_server EXIT
pkill -f "listen 127.0.0.1:$PORT" || true

# job NAME CLASS COMMAND [QUEUE]: a v2 job of $INSTANCES (2) 1-CPU tasks, no retry left.
job() {
  cat >"$WORK/$1.yaml" <<EOF
protocolVersion: 2
name: $1
type: job
jobRetryCount: 0
prerequisites:
  - {type: dockerimage, name: image, uri: "localhost/debian:bookworm"}
${4:+defaults: {virtualCluster: $4\}}
taskRoles:
  worker:
    instances: ${INSTANCES:-2}
    dockerImage: image
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands:
      - $3
extras:
  hivedScheduler: {jobPriorityClass: $2}
EOF
  rl submit "$WORK/$1.yaml"
}
# Runs until preempted in its first attempt; its next attempt ends at once, succeeded.
FIRST_ATTEMPT_WAITS='if [ "$FC_FRAMEWORK_ATTEMPT_ID" = 0 ]; then exec sleep 3600; fi; echo "attempt $FC_FRAMEWORK_ATTEMPT_ID done"'
finish() {
  for j in "$@"; do rl delete "$j" >/dev/null 2>&1 || true; done
}
# The first attempt's end of job $1, as its status says it.
first_end() {
  field "$1" 'v["jobStatus"]["attempts"][0].get("endedBy") or ""'
}
report() { # JOB: its retries, and how its first attempt ended
  echo "  $1: retries $(field "$1" 'v["jobStatus"]["retries"]'); attempt 0: $(field "$1" 'v["jobStatus"]["attempts"][0]["exitCode"]') $(first_end "$1")"
}

# The real node, where the pods run.
node_up() {
  "$S/start-node.sh" >/dev/null
  ctr --address "$H/node/containerd/containerd.sock" -n k8s.io images ls -q | grep -x >/dev/null localhost/kube-runtime:0.1.0 \
    || fail "image localhost/kube-runtime:0.1.0 missing: build it with $S/build-runtime-image.sh $ROOT"
}
# Volcano's preemption as docs/operating.md configures it: the release's configuration
# with preempt, and enqueue not gated by the free resources (a job that is not Inqueue is
# never a preemptor). The scheduler reads the file again when it changes.
VOLCANO_PREEMPTING='actions: "enqueue, allocate, preempt, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
    enableJobEnqueued: false
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
    enableJobEnqueued: false
  - name: nodeorder
  - name: binpack'
F() { printf '%s' "$(id -un)/$1" | sha256sum | cut -c1-32; } # job $1's Framework
placed() { "$S/fake-kubelet.sh" bound "$(F "$1")" -n default | grep >/dev/null "^$2/$2 bound"; }
# Fake-kubelet: job $1's bound pods run; or all its pods end with code 0.
run_bound() { "$S/fake-kubelet.sh" run-bound "$(F "$1")" -n default >/dev/null; }
succeed() {
  local pod
  for pod in $(kubectl get pods -n default -l "FC_FRAMEWORK_NAME=$(F "$1")" -o name); do
    "$S/fake-kubelet.sh" terminate "${pod#pod/}" 0 -n default >/dev/null
  done
}

"$S/start-all.sh" >/dev/null
# What an earlier run that failed left in the namespace.
kubectl delete frameworks -n default -l app.kubernetes.io/managed-by=rest-lite --ignore-not-found --wait=true >/dev/null
# A job naming a class the cluster lacks is refused: the classes first.
"$S/priorities.sh" >/dev/null
for case in $CASES; do
  : >"$WORK/serve.log"
  say "$case"
  case $case in
    kueue-preempt)
      node_up
      "$S/start-kueue.sh" >/dev/null
      "$S/priorities.sh" # Kueue's WorkloadPriorityClasses too, and cq's preemption
      # The node's 2 CPUs are the queue's: one 2-task job at a time.
      index=$(kubectl get clusterqueue cq -o json | python3 -c 'import json,sys
r=json.load(sys.stdin)["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
print([x["name"] for x in r].index("cpu"))')
      kubectl patch clusterqueue cq --type json \
        -p "[{\"op\":\"replace\",\"path\":\"/spec/resourceGroups/0/flavors/0/resources/$index/nominalQuota\",\"value\":\"2\"}]" >/dev/null
      start_server kueue
      job borrower oppo "$FIRST_ATTEMPT_WAITS" vc1
      until_true 180 "borrower (oppo) RUNNING" is_state borrower RUNNING
      watch_states borrower & WATCH=$!
      job urgent prod "sleep 20" vc1
      until_true 60 "urgent (prod) placed whole and RUNNING" is_state urgent RUNNING
      until_true 30 "borrower WAITING" is_state borrower WAITING
      echo "  borrower: $(waiting_says borrower)"
      until_true 120 "urgent SUCCEEDED" is_state urgent SUCCEEDED
      until_true 120 "borrower placed whole again and SUCCEEDED" is_state borrower SUCCEEDED
      kill "$WATCH"
      never_failed borrower
      report borrower
      first_end borrower | grep >/dev/null "^Kueue (.*Preempted" || fail "borrower's history does not name Kueue's preemption"
      [ "$(field borrower 'v["jobStatus"]["attempts"][0]["exitCode"]')" = -101 ] || fail "attempt 0 did not end as PodExternalDeleted"
      finish borrower urgent
      stop_server
      "$S/stop-kueue.sh" >/dev/null
      ;;
    drain)
      node_up
      start_server none
      job drained test "$FIRST_ATTEMPT_WAITS"
      until_true 180 "drained RUNNING" is_state drained RUNNING
      watch_states drained & WATCH=$!
      kubectl drain "$NODE" --ignore-daemonsets --delete-emptydir-data --force --timeout=120s >"$WORK/drain.log" 2>&1 \
        || fail "kubectl drain: $(tail -n 3 "$WORK/drain.log")"
      until_true 60 "drained WAITING while the node is cordoned" is_state drained WAITING
      until_true 60 "drained waits in the scheduler's words" says drained unschedulable
      echo "  drained: $(waiting_says drained)"
      kubectl uncordon "$NODE" >/dev/null
      until_true 120 "drained placed again and SUCCEEDED" is_state drained SUCCEEDED
      kill "$WATCH"
      never_failed drained
      report drained
      first_end drained | grep >/dev/null "eviction API" || fail "drained's history does not name the eviction"
      finish drained
      stop_server
      ;;
    volcano-preempt)
      # Two nodes of 3 CPUs: the oppo job's six tasks take them all, and every task of
      # the prod job must take one of its places. The nodes' heartbeat writes their size
      # every 10 s: Volcano (and the heartbeat) started afresh with it, stopped after.
      "$S/stop-volcano.sh" >/dev/null
      GANG_NODE_CPU=3 "$S/start-volcano.sh" >/dev/null
      printf '%s\n' "$VOLCANO_PREEMPTING" >"$H/volcano/volcano-scheduler.conf"
      start_server volcano
      export INSTANCES=6
      job borrower oppo "sleep 3600" vc1
      until_true 120 "borrower (oppo) placed whole" placed borrower 6
      run_bound borrower
      until_true 60 "borrower RUNNING" is_state borrower RUNNING
      watch_states borrower & WATCH=$!
      job urgent prod "sleep 3600" vc1
      until_true 60 "urgent (prod) placed whole" placed urgent 6
      run_bound urgent
      until_true 30 "urgent RUNNING" is_state urgent RUNNING
      until_true 60 "borrower WAITING" is_state borrower WAITING
      echo "  borrower: $(waiting_says borrower)"
      succeed urgent
      until_true 60 "urgent SUCCEEDED" is_state urgent SUCCEEDED
      until_true 120 "borrower placed whole again" placed borrower 6
      run_bound borrower
      until_true 60 "borrower RUNNING again" is_state borrower RUNNING
      succeed borrower
      until_true 60 "borrower SUCCEEDED" is_state borrower SUCCEEDED
      kill "$WATCH"
      never_failed borrower
      report borrower
      first_end borrower | grep >/dev/null "^Volcano (Evict)" || fail "borrower's history does not name Volcano's eviction"
      [ "$(field borrower 'v["jobStatus"]["attempts"][0]["exitCode"]')" = -101 ] || fail "attempt 0 did not end as PodExternalDeleted"
      [ "$(field borrower 'v["jobStatus"]["retries"]')" = 1 ] || fail "borrower was not retried once"
      finish borrower urgent
      unset INSTANCES
      stop_server
      "$S/stop-volcano.sh" >/dev/null
      ;;
    *) fail "no case $case" ;;
  esac
done
echo "all passed"
