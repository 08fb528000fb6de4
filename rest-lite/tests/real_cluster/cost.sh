#!/bin/bash
# What a job costs a real control plane: ../shared/k8s-harness's kube-apiserver, etcd,
# kube-controller-manager and FrameworkController, no kubelet (pods stay unscheduled, the
# fake kubelet ends them). For each size, in one run and in namespaces of their own:
#
#   floor    the Framework `rest-lite transform` makes of the job, created with
#            `kubectl create` (with the one ServiceAccount its pods name, which admission
#            requires);
#   rest-lite  the same job submitted to `rest-lite serve --backend kube` with the shipped
#            config (deploy/rest-lite/config.yaml).
#
# Each: the time from the request until every pod exists (one watch counts them), the API
# server's CPU in that time (/proc of its process), the objects added to the namespace and
# their bytes in etcd (etcdctl, the stored values); then every pod ended (exit 0) by the
# fake kubelet and FrameworkController's completion awaited: the objects and bytes left.
# Writes benchmarks/results/<date>-<machine>/cluster-cost.json (bench_results' format).
#
#   cargo build --release -p rest-lite --bin rest-lite
#   K8S_HARNESS=~/.k8s-harness HARNESS_SCRIPTS=../shared/k8s-harness \
#     rest-lite/tests/real_cluster/cost.sh [TASKS...]      # default: 100 1000
set -euo pipefail
H=${K8S_HARNESS:?K8S_HARNESS: the harness directory}
S=${HARNESS_SCRIPTS:?HARNESS_SCRIPTS: the harness scripts directory}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
R=${REST_LITE:-$ROOT/target/release/rest-lite}
export KUBECONFIG=$H/kubeconfig PATH=$H/bin:$PATH K8S_HARNESS=$H
WORK=$ROOT/target/real-cluster-cost
rm -rf "$WORK" && mkdir -p "$WORK"
SIZES=${*:-100 1000}
PORT=19481
ETCD=${ETCD_ENDPOINT:-http://127.0.0.1:2379}
ROWS=$WORK/rows.jsonl
: >"$ROWS"

say() { echo "=== $(date -u +%T) $*" >&2; }
fail() { echo "FAILED: $*" >&2; tail -n 20 "$WORK"/serve-*.log >&2 2>/dev/null || true; exit 1; }
row() { # CASE METRIC VALUE UNIT
  printf '{"build":"this","case":"%s","metric":"%s","value":%s,"unit":"%s"}\n' "$1" "$2" "$3" "$4" >>"$ROWS"
}
[ -x "$R" ] || fail "no $R: cargo build --release -p rest-lite --bin rest-lite"
command -v etcdctl >/dev/null || fail "no etcdctl (apt-get install etcd-client)"

"$S/start-all.sh" >/dev/null
# Pods must stay unscheduled: a real node would run them.
"$S/stop-node.sh" >/dev/null 2>&1 || true
APISERVER_PID=$(cat "$H/pids/kube-apiserver.pid")
TICK=$(getconf CLK_TCK)
cpu() { awk -v t="$TICK" '{printf "%.3f", ($14 + $15) / t}' "/proc/$APISERVER_PID/stat"; }
now() { date +%s.%N; }

# The objects of namespace $1 by kind, and their bytes in etcd: "KIND COUNT BYTES" lines.
stored() {
  etcdctl --endpoints="$ETCD" get --prefix /registry/ --keys-only=false -w json \
    | python3 -c '
import base64, collections, json, sys
ns = sys.argv[1]
count, size = collections.Counter(), collections.Counter()
for kv in json.load(sys.stdin).get("kvs", []):
    key = base64.b64decode(kv["key"]).decode()
    parts = key.split("/")
    if ns not in parts[2:-1]:
        continue
    kind = parts[parts.index(ns) - 1]
    count[kind] += 1
    size[kind] += len(base64.b64decode(kv.get("value", "")))
for kind in sorted(count):
    print(kind, count[kind], size[kind])
' "$1"
}
# stored's lines of $1 less the namespace's own (its default ServiceAccount, the root CA).
added() {
  awk 'NR == FNR { base[$1] = $2; bytes[$1] = $3; next }
       { n = $2 - base[$1]; b = $3 - bytes[$1]; if (n > 0 || b > 0) print $1, n, b }' "$2" "$1"
}
record_stored() { # CASE WHEN FILE
  local objects=0 bytes=0 pods=0 pod_bytes=0 kind n b
  while read -r kind n b; do
    if [ "$kind" = pods ]; then pods=$n; pod_bytes=$b; continue; fi
    objects=$((objects + n)); bytes=$((bytes + b))
    row "$1" "$2: $kind" "$n" ""
  done <"$3"
  row "$1" "$2: objects beside the pods" "$objects" ""
  row "$1" "$2: their bytes in etcd" "$bytes" "B"
  row "$1" "$2: pods" "$pods" ""
  row "$1" "$2: the pods' bytes in etcd" "$pod_bytes" "B"
  echo "  $2: $objects objects beside $pods pods, $bytes B (pods $pod_bytes B)" >&2
}

new_namespace() {
  kubectl create namespace "$1" >/dev/null
  for _ in $(seq 100); do
    kubectl get serviceaccount default -n "$1" >/dev/null 2>&1 \
      && kubectl get configmap kube-root-ca.crt -n "$1" >/dev/null 2>&1 && break
    sleep 0.1
  done
  stored "$1" >"$WORK/$1.base"
}
# Waits until namespace $1 holds $2 pods, counted by one watch; prints the time it returned.
pods_exist() {
  local fifo=$WORK/watch.$1
  rm -f "$fifo"; mkfifo "$fifo"
  kubectl get pods -n "$1" -w -o name >"$fifo" 2>/dev/null &
  local watch=$!
  # (mawk reads a pipe by blocks: a shell loop sees each line as it comes.)
  local -A seen=()
  local line
  while [ "${#seen[@]}" -lt "$2" ] && read -r line; do seen[$line]=1; done <"$fifo"
  now
  kill "$watch" 2>/dev/null || true
  wait "$watch" 2>/dev/null || true
  rm -f "$fifo"
}
# Ends every pod of Framework $1 in namespace $2 with exit 0 and waits for the Framework to
# complete and its pods to go.
finish() {
  "$S/fake-kubelet.sh" run "$1" -n "$2" >/dev/null
  kubectl get pods -n "$2" -l "FC_FRAMEWORK_NAME=$1" -o name | sed 's|^pod/||' \
    | xargs -P 4 -I{} "$S/fake-kubelet.sh" terminate {} 0 -n "$2" >/dev/null
  for _ in $(seq 600); do
    state=$(kubectl get framework "$1" -n "$2" -o jsonpath='{.status.state}' 2>/dev/null || true)
    left=$(kubectl get pods -n "$2" -l "FC_FRAMEWORK_NAME=$1" --no-headers 2>/dev/null | wc -l)
    [ "$state" = Completed ] && [ "$left" = 0 ] && return 0
    sleep 1
  done
  fail "Framework $1 in $2 did not complete (state $state, $left pods)"
}

job_spec() { # TASKS
  cat <<EOF
jobName: cost$1
image: busybox
taskRoles:
  - name: worker
    taskNumber: $1
    cpuNumber: 1
    memoryMB: 512
    command: echo done
EOF
}

config() { # NAMESPACE: the shipped config in that namespace
  sed "s/^namespace: .*/namespace: $1/" "$ROOT/deploy/rest-lite/config.yaml" >"$WORK/config-$1.yaml"
  grep -q "^namespace: $1" "$WORK/config-$1.yaml" || echo "namespace: $1" >>"$WORK/config-$1.yaml"
  echo "$WORK/config-$1.yaml"
}

for n in $SIZES; do
  job_spec "$n" >"$WORK/job-$n.yaml"
  # The floor: the same Framework, created by kubectl.
  ns=cost-floor-$n
  case="$n tasks, kubectl create of the Framework"
  say "$case"
  new_namespace "$ns"
  "$R" transform --config "$(config "$ns")" --seed 1 "$WORK/job-$n.yaml" >"$WORK/framework-$n.yaml"
  fw=$(awk '/^  name: / { print $2; exit }' "$WORK/framework-$n.yaml")
  account=$(grep -m1 'serviceAccountName:' "$WORK/framework-$n.yaml" | awk '{print $2}')
  [ -n "$account" ] && kubectl create serviceaccount "$account" -n "$ns" >/dev/null
  c0=$(cpu); t0=$(now)
  kubectl create -n "$ns" -f "$WORK/framework-$n.yaml" >/dev/null
  t1=$(pods_exist "$ns" "$n"); c1=$(cpu)
  row "$case" "request → every pod exists" "$(echo "($t1 - $t0) * 1000" | bc -l | xargs printf '%.0f')" "ms"
  row "$case" "the API server's CPU meanwhile" "$(echo "$c1 - $c0" | bc -l | xargs printf '%.2f')" "s"
  echo "  every pod: $(echo "$t1 - $t0" | bc -l | xargs printf '%.1f') s, API server CPU $(echo "$c1 - $c0" | bc -l | xargs printf '%.1f') s" >&2
  stored "$ns" >"$WORK/$ns.running"
  added "$WORK/$ns.running" "$WORK/$ns.base" >"$WORK/$ns.added"
  record_stored "$case" "running" "$WORK/$ns.added"
  finish "$fw" "$ns"
  stored "$ns" >"$WORK/$ns.ended"
  added "$WORK/$ns.ended" "$WORK/$ns.base" >"$WORK/$ns.ended.added"
  record_stored "$case" "ended" "$WORK/$ns.ended.added"
  kubectl delete namespace "$ns" --wait=false >/dev/null

  # Through rest-lite, the shipped config.
  ns=cost-rest-lite-$n
  case="$n tasks, through rest-lite"
  say "$case"
  new_namespace "$ns"
  REST_LITE_STATE_DIR=$WORK/state-$n setsid "$R" serve --backend kube --kubeconfig "$KUBECONFIG" \
    --config "$(config "$ns")" --listen "127.0.0.1:$PORT" >"$WORK/serve-$n.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
  c0=$(cpu); t0=$(now)
  REST_LITE_STATE_DIR=$WORK/state-$n "$R" submit "$WORK/job-$n.yaml" --server "http://127.0.0.1:$PORT" >/dev/null
  t1=$(pods_exist "$ns" "$n"); c1=$(cpu)
  row "$case" "request → every pod exists" "$(echo "($t1 - $t0) * 1000" | bc -l | xargs printf '%.0f')" "ms"
  row "$case" "the API server's CPU meanwhile" "$(echo "$c1 - $c0" | bc -l | xargs printf '%.2f')" "s"
  echo "  every pod: $(echo "$t1 - $t0" | bc -l | xargs printf '%.1f') s, API server CPU $(echo "$c1 - $c0" | bc -l | xargs printf '%.1f') s" >&2
  fw=$(kubectl get frameworks -n "$ns" -o jsonpath='{.items[0].metadata.name}')
  stored "$ns" >"$WORK/$ns.running"
  added "$WORK/$ns.running" "$WORK/$ns.base" >"$WORK/$ns.added"
  record_stored "$case" "running" "$WORK/$ns.added"
  finish "$fw" "$ns"
  # The server keeps what the ended containers left (no kubelet: their termination
  # messages) within a second or two of their end.
  for _ in $(seq 30); do
    kubectl get configmap "$fw-logs" -n "$ns" >/dev/null 2>&1 && break
    sleep 1
  done
  sleep 3
  stored "$ns" >"$WORK/$ns.ended"
  added "$WORK/$ns.ended" "$WORK/$ns.base" >"$WORK/$ns.ended.added"
  record_stored "$case" "ended" "$WORK/$ns.ended.added"
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  kubectl delete namespace "$ns" --wait=false >/dev/null
done

# The results file, in bench_results' format.
# The machine as bench_results names it (test-support/src/bench_results.rs, machine_slug).
machine=${BENCH_MACHINE:-$(python3 -c '
import re
cpu = open("/proc/cpuinfo").read()
model = re.search(r"model name\s*:\s*(.*)", cpu)
model = model.group(1) if model else "unknown"
for mark in ("(R)", "(TM)", "(tm)"):
    model = model.replace(mark, " ")
family = [w.lower() for w in model.split() if w.lower() not in ("cpu", "processor")][:2]
cpus = max(1, len(re.findall(r"^processor\s*:", cpu, re.M)))
kib = int(re.search(r"MemTotal:\s*(\d+)", open("/proc/meminfo").read()).group(1))
vm = "-vm" if re.search(r"^flags\s*:.*\bhypervisor\b", cpu, re.M) else ""
slug = re.sub(r"[^a-z0-9]+", "-", "-".join(family) + f"-{cpus}c-{-(-kib // 1048576)}g{vm}").strip("-")
print(slug)
')}
dir=$ROOT/benchmarks/results/$(date -u +%F)-$machine
mkdir -p "$dir"
file=$dir/cluster-cost.json
i=2
while [ -e "$file" ]; do file=$dir/cluster-cost-$i.json; i=$((i + 1)); done
python3 - "$ROWS" "$file" "$SIZES" <<'EOF'
import json, subprocess, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1])]
def out(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip() or None
    except OSError:
        return None
doc = {
    "bench": "cluster-cost",
    "variant": None,
    "recorded": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "commit": out("git", "rev-parse", "--short", "HEAD"),
    "dirty": bool(out("git", "status", "--porcelain")),
    "machine": sys.argv[2].split("/")[-2].split("-", 3)[-1],
    "cpu": None,
    "rustc": out("rustc", "-V"),
    "kernel": out("uname", "-r"),
    "command": "K8S_HARNESS=~/.k8s-harness HARNESS_SCRIPTS=../shared/k8s-harness rest-lite/tests/real_cluster/cost.sh " + sys.argv[3],
    "args": sys.argv[3].split(),
    "notes": ["kube-apiserver v1.36.2, etcd 3.4 and FrameworkController d6e7078 of ../shared/k8s-harness, no kubelet: pods stay unscheduled, the fake kubelet ends them",
              "the floor and rest-lite in one run, each in a namespace of its own; objects and bytes are those added to the namespace (its default ServiceAccount and root CA left out), bytes as etcd stores them"],
    "rows": rows,
}
json.dump(doc, open(sys.argv[2], "w"), indent=1)
print(sys.argv[2])
EOF
