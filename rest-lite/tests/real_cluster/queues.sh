#!/bin/bash
# Teams' queues on a real control plane: ../shared/k8s-harness's kube-apiserver,
# kube-controller-manager and FrameworkController with the real Kueue v0.19.2
# (start-kueue.sh: ClusterQueue cq of 8 CPUs, LocalQueue vc1) or the real Volcano v1.7.0
# (start-volcano.sh: Queue vc1, two fake nodes of 4 CPUs), and `rest-lite serve` on this
# machine (the checkout's debug build) with `gang.engine` kueue or volcano. Every job is two
# 6-task jobs' worth of 1 CPU per task: one fits, the second waits. Nothing runs the pods:
# fake-kubelet.sh says they run, or that a container exited. CI cannot build Kueue and
# Volcano; run by hand:
#
#   cargo build -p rest-lite --bin rest-lite
#   K8S_HARNESS=~/.k8s-harness HARNESS_SCRIPTS=../shared/k8s-harness rest-lite/tests/real_cluster/queues.sh [CASE...]
#
# Cases (all by default):
#   kueue-stop       the first job placed whole, the second WAITING in Kueue's words; the
#                    first stopped: STOPPED, its pods gone, the second placed whole
#   kueue-delete     the same, the first deleted
#   kueue-retry      a task of the first fails with a retry left: the attempt's pods go, its
#                    quota is free and goes to the first's next attempt or to the second, as
#                    the engine orders them; the other waits in the engine's words and is
#                    placed whole once that one is stopped
#   kueue-fail       a task of the first fails with no retry left: FAILED, its pods gone,
#                    the second placed whole
#   kueue-down       the first stopped (through kubectl) while no server runs: the server
#                    that starts lets its pods go and the second is placed
#   kueue-namespace  a team's namespace (its own server running) deleted with its job
#                    placed: a job of another namespace waiting on the same ClusterQueue is
#                    placed whole, and the namespace goes
#   volcano-stop, volcano-delete, volcano-retry, volcano-fail   as for Kueue
#   volcano-closed   a job naming a Closed Volcano queue is refused (400)
# "placed" is bounded by 60 s after the event that frees the quota.
set -euo pipefail
H=${K8S_HARNESS:?K8S_HARNESS: the harness directory}
S=${HARNESS_SCRIPTS:?HARNESS_SCRIPTS: the harness scripts directory}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
R=${REST_LITE:-$ROOT/target/debug/rest-lite}
export KUBECONFIG=$H/kubeconfig PATH=$H/bin:$PATH K8S_HARNESS=$H
WORK=$ROOT/target/real-cluster-queues
rm -rf "$WORK" && mkdir -p "$WORK"
CASES=${*:-kueue-stop kueue-delete kueue-retry kueue-fail kueue-down kueue-namespace volcano-stop volcano-delete volcano-retry volcano-fail volcano-closed}
PORT=19471
SERVER=http://127.0.0.1:$PORT

say() { echo "=== $(date -u +%T) $*"; }
fail() {
  echo "FAILED: $*" >&2
  echo "--- server log (tail)" >&2; tail -n 30 "$WORK/serve.log" >&2 || true
  kubectl get pods,workloads.kueue.x-k8s.io,podgroups.scheduling.volcano.sh -A 2>&1 | tail -n 30 >&2 || true
  exit 1
}
rl() { REST_LITE_STATE_DIR=$WORK/state "$R" "$@" --server "$SERVER"; }
state() { rl jobs 2>/dev/null | awk -v j="$1" '$1==j {print $3}'; }
# until SECONDS WHAT CMD...: CMD succeeds within SECONDS, else fail with WHAT.
until_true() {
  local limit=$1 what=$2 start=$SECONDS; shift 2
  until "$@" >/dev/null 2>&1; do
    [ $((SECONDS - start)) -lt "$limit" ] || fail "$what (not within $limit s)"
    sleep 1
  done
  echo "  $what: $((SECONDS - start)) s"
}
is_state() { [ "$(state "$1")" = "$2" ]; }
# The Framework of job $1 of this machine's user (pai_contract::names::framework_name).
framework() { printf '%s' "$(id -un)/$1" | sha256sum | cut -c1-32; }
retried_once() { [ "$(rl status "$1" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobStatus"]["retries"])')" = 1 ]; }
gone_job() { ! rl jobs 2>/dev/null | awk '{print $1}' | grep -x >/dev/null "$1"; }
deleting() { kubectl get pods -n "$2" -l "FC_FRAMEWORK_NAME=$1" -o jsonpath='{.items[*].metadata.deletionTimestamp}' | grep >/dev/null T; }
no_namespace() { ! kubectl get namespace "$1"; }
pods_of() { kubectl get pods -n "$2" -l "FC_FRAMEWORK_NAME=$1" --no-headers 2>/dev/null | wc -l; }
no_pods() { [ "$(pods_of "$1" "$2")" = 0 ]; }
# Kueue ungated (and Volcano bound) all 6 pods of Framework $1 in namespace $2.
placed() {
  local out
  if [ "$ENGINE" = kueue ]; then
    out=$(kubectl get pods -n "$2" -l "FC_FRAMEWORK_NAME=$1" -o jsonpath='{range .items[*]}{.metadata.deletionTimestamp}{"|"}{.spec.schedulingGates}{"\n"}{end}')
    [ "$(printf '%s\n' "$out" | grep -c '^|$')" = 6 ]
  else
    "$S/fake-kubelet.sh" bound "$1" -n "$2" | grep >/dev/null '^6/6 bound'
  fi
}
one_placed() { placed "$1" default || placed "$2" default; }
run_pods() {
  if [ "$ENGINE" = kueue ]; then "$S/fake-kubelet.sh" run "$1" -n "$2" >/dev/null
  else "$S/fake-kubelet.sh" run-bound "$1" -n "$2" >/dev/null; fi
}
waiting_says() { rl status "$1" | grep -E "^waiting for" | sed -n 1p; }
# Job $1 waits, in the engine's own words (Kueue's Workload, Volcano's PodGroup).
engine_words() {
  if [ "$ENGINE" = kueue ]; then waiting_says "$1" | grep >/dev/null "quota"
  else waiting_says "$1" | grep -Eq "gang|Inqueue|Pending"; fi
}

start_server() { # NAMESPACE
  cat >"$WORK/config.yaml" <<EOF
namespace: $1
gang:
  engine: $ENGINE
  defaultQueue: vc1
EOF
  REST_LITE_STATE_DIR=$WORK/state setsid "$R" serve --backend kube --kubeconfig "$KUBECONFIG" \
    --config "$WORK/config.yaml" --listen "127.0.0.1:$PORT" >>"$WORK/serve.log" 2>&1 &
  echo $! >"$WORK/serve.pid"
  until_true 30 "server up" rl jobs
}
stop_server() { kill "$(cat "$WORK/serve.pid")" 2>/dev/null || true; sleep 1; }
write_job() { # NAME [RETRIES]: $WORK/NAME.yaml
  cat >"$WORK/$1.yaml" <<EOF
jobName: $1
image: busybox
virtualCluster: vc1
retryCount: ${2:-0}
taskRoles:
  - name: worker
    taskNumber: 6
    cpuNumber: 1
    memoryMB: 512
    command: sleep 3600
EOF
}
job() { write_job "$@"; rl submit "$WORK/$1.yaml" >/dev/null; }
# Two jobs in namespace $1: the first placed and running, the second waiting; sets F1, F2.
two_jobs() {
  local ns=$1 a=$2 b=$3 retries=${4:-0}
  job "$a" "$retries"
  F1=$(framework "$a")
  until_true 60 "$a placed whole" placed "$F1" "$ns"
  run_pods "$F1" "$ns"
  until_true 60 "$a RUNNING" is_state "$a" RUNNING
  job "$b"
  F2=$(framework "$b")
  until_true 60 "$b waits in $ENGINE's words" engine_words "$b"
  echo "  $b: $(waiting_says "$b")"
  sleep 5
  placed "$F2" "$ns" && fail "$b placed while $a holds the quota"
  return 0
}
finish() { # end what a case left, as a user would
  for j in "$@"; do rl delete "$j" >/dev/null 2>&1 || true; done
  for j in "$@"; do until_true 90 "$j deleted" gone_job "$j"; done
}

engine_up() {
  if [ "$1" = kueue ]; then "$S/start-kueue.sh" >/dev/null; else "$S/start-volcano.sh" >/dev/null; fi
}

"$S/start-all.sh" >/dev/null
for case in $CASES; do
  ENGINE=${case%%-*}
  engine_up "$ENGINE"
  : >"$WORK/serve.log"
  say "$case"
  case $case in
    kueue-stop|volcano-stop|kueue-delete|volcano-delete)
      start_server default
      two_jobs default "${case}-a" "${case}-b"
      if [ "${case#*-}" = stop ]; then
        rl stop "${case}-a" >/dev/null
        until_true 60 "${case}-a STOPPED" is_state "${case}-a" STOPPED
      else
        rl delete "${case}-a" >/dev/null
      fi
      until_true 60 "${case}-a's pods gone" no_pods "$F1" default
      until_true 60 "${case}-b placed whole" placed "$F2" default
      finish "${case}-a" "${case}-b"
      stop_server
      ;;
    kueue-retry|volcano-retry)
      start_server default
      two_jobs default "${case}-a" "${case}-b" 1
      "$S/fake-kubelet.sh" terminate "$F1-worker-0" 1 -n default >/dev/null
      until_true 60 "${case}-a retried" retried_once "${case}-a"
      # The quota a's failed attempt held goes to a's next attempt or to b, as the
      # engine orders them (Kueue's BestEffortFIFO tries the head, b, before the quota is
      # seen free, then the next, a); the other waits, and gets it when that one stops.
      until_true 60 "a's next attempt or b placed whole" one_placed "$F1" "$F2"
      if placed "$F1" default; then first=a other=b; F_OTHER=$F2; else first=b other=a; F_OTHER=$F1; fi
      echo "  placed first: ${case}-$first"
      until_true 60 "${case}-$other waits in $ENGINE's words" engine_words "${case}-$other"
      echo "  ${case}-$other: $(waiting_says "${case}-$other")"
      rl stop "${case}-$first" >/dev/null
      until_true 60 "${case}-$other placed whole" placed "$F_OTHER" default
      finish "${case}-a" "${case}-b"
      stop_server
      ;;
    kueue-fail|volcano-fail)
      start_server default
      two_jobs default "${case}-a" "${case}-b"
      "$S/fake-kubelet.sh" terminate "$F1-worker-0" 1 -n default >/dev/null
      until_true 60 "${case}-a FAILED" is_state "${case}-a" FAILED
      until_true 60 "${case}-a's pods gone" no_pods "$F1" default
      until_true 60 "${case}-b placed whole" placed "$F2" default
      finish "${case}-a" "${case}-b"
      stop_server
      ;;
    kueue-down)
      start_server default
      two_jobs default down-a down-b
      stop_server
      kubectl patch framework "$F1" --type merge -p '{"spec":{"executionType":"Stop"}}' >/dev/null
      until_true 60 "down-a's pods being deleted" deleting "$F1" default
      sleep 5
      [ "$(pods_of "$F1" default)" = 6 ] || fail "down-a's pods went without a server: the case shows nothing"
      echo "  down-a's 6 pods held while no server runs"
      start_server default
      until_true 60 "down-a STOPPED" is_state down-a STOPPED
      until_true 60 "down-b placed whole" placed "$F2" default
      finish down-a down-b
      stop_server
      ;;
    kueue-namespace)
      # The team's namespace has its own server (its own port and state), which runs
      # while the namespace is deleted, as when an operator deletes the namespace first.
      ns=q-team-$$
      "$S/kueue-localqueue.sh" vc1 "$ns" >/dev/null
      cat >"$WORK/team.yaml" <<EOF
namespace: $ns
gang: {engine: kueue, defaultQueue: vc1}
EOF
      REST_LITE_STATE_DIR=$WORK/team-state setsid "$R" serve --backend kube --kubeconfig "$KUBECONFIG" \
        --config "$WORK/team.yaml" --listen "127.0.0.1:$((PORT + 1))" >>"$WORK/serve.log" 2>&1 &
      team_pid=$!
      team() { REST_LITE_STATE_DIR=$WORK/team-state "$R" "$@" --server "http://127.0.0.1:$((PORT + 1))"; }
      until_true 30 "the team's server up" team jobs
      write_job ns-a
      team submit "$WORK/ns-a.yaml" >/dev/null
      FA=$(framework ns-a)
      until_true 60 "ns-a placed whole" placed "$FA" "$ns"
      run_pods "$FA" "$ns"
      start_server default
      job ns-b
      FB=$(framework ns-b)
      until_true 60 "ns-b waits in Kueue's words" engine_words ns-b
      echo "  ns-b: $(waiting_says ns-b)"
      kubectl delete namespace "$ns" --wait=false >/dev/null
      until_true 60 "ns-b placed whole" placed "$FB" default
      until_true 60 "namespace $ns gone" no_namespace "$ns"
      kill "$team_pid" 2>/dev/null || true
      finish ns-b
      stop_server
      ;;
    volcano-closed)
      kubectl patch queue.scheduling.volcano.sh vc1 --type merge --subresource status -p '{"status":{"state":"Closed"}}' >/dev/null 2>&1 ||
        kubectl patch queue.scheduling.volcano.sh vc1 --type merge -p '{"status":{"state":"Closed"}}' >/dev/null
      start_server default
      job_out=$(job closed-a 2>&1 || true)
      echo "  $job_out"
      grep -q "virtualCluster" <<<"$job_out" || fail "a closed queue was not refused: $job_out"
      kubectl patch queue.scheduling.volcano.sh vc1 --type merge --subresource status -p '{"status":{"state":"Open"}}' >/dev/null 2>&1 || true
      stop_server
      ;;
    *) fail "no case $case" ;;
  esac
done
say "PASSED: $CASES"
