#!/bin/bash
# The operator's guide on a real control plane: rest-lite installed from deploy/ by
# kustomize (two replicas) on ../shared/k8s-harness's kube-apiserver, kube-controller-manager
# (namespace controller, garbage collector, token invalidation), FrameworkController and
# real node (kubelet, containerd, CNI, kube-scheduler). Run by rest-lite/tests/real_cluster.rs
# where K8S_HARNESS names a built harness, or by hand:
#
#   K8S_HARNESS=~/.k8s-harness HARNESS_SCRIPTS=../shared/k8s-harness rest-lite/tests/real_cluster/run.sh [CASE...]
#
# Needs the images localhost/rest-lite:0.1.0 and localhost/kube-runtime:0.1.0 built from
# this checkout (build-server-image.sh, build-runtime-image.sh after cargo build --release).
# Cases (all by default):
#   logs       a finished job's log after its pods are gone, on both replicas, before and
#              after a rolling restart; with its times (timestamps=true), kept and running
#   history    with the job history (a throwaway PostgreSQL on the node's address): a
#              finished 2-task job's logs on both replicas once its pods are gone, then
#              once its Framework and kept-log ConfigMap are gone too, from the database
#   jax        examples/jax-allgather.yaml, as it is but for its image, on the real node: two
#              pods whose JAX processes all-gather across them (the image is made here from
#              this machine's Python and target/frameworks-venv: .ci/frameworks-venv)
#   delete-k   `kubectl delete -k` with a job running, then the namespace: gone within 60 s
#   reversed   the namespace deleted first (server and job running), then `delete -k`
#   killed     the servers killed (force-deleted, their ReplicaSet gone: never replaced)
#              with a job running, then the namespace: gone within 60 s
#   credentials  the server's ServiceAccount deleted while it runs: /readyz 503 with the
#              reason, one line a minute at most; made again, the pods restarted, ready
#   config     the overlay's config changed and applied while both replicas run (a storage
#              added, the retention lowered to one finished job): both take it, no pod
#              restarts, the older finished jobs go, the storage is listed by each
set -euo pipefail
H=${K8S_HARNESS:?K8S_HARNESS: the harness directory}
S=${HARNESS_SCRIPTS:?HARNESS_SCRIPTS: the harness scripts directory}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
export KUBECONFIG=$H/kubeconfig PATH=$H/bin:$PATH
# Inside the checkout: kustomize takes a base by a relative path only.
WORK=$ROOT/target/real-cluster
rm -rf "$WORK" && mkdir -p "$WORK"
TOKEN=real-cluster-token
CASES=${*:-logs history jax delete-k reversed killed credentials config}

say() { echo "=== $(date -u +%T) $*"; }
# After a pipe, `grep >/dev/null` and `sed -n 1p`, never `grep -q` or `head -1`: those
# stop reading early, and the writer's SIGPIPE then fails the pipeline under pipefail.
fail() { echo "FAILED: $*" >&2; exit 1; }

"$S/start-all.sh" >/dev/null
"$S/start-node.sh" >/dev/null
for image in rest-lite kube-runtime; do
  ctr --address "$H/node/containerd/containerd.sock" -n k8s.io images ls -q | grep -x >/dev/null "localhost/$image:0.1.0" \
    || fail "image localhost/$image:0.1.0 missing: build it with $S/build-*-image.sh $ROOT"
done

# The operator's overlay (docs/operating.md, steps 3 to 5) for namespace $1; with $2 =
# history, the job history's component and config (step 5).
overlay() {
  local ns=$1 dir=$WORK/$1 history=${2:-}
  mkdir -p "$dir"
  cat >"$dir/config.yaml" <<EOF
runtimeImage: localhost/kube-runtime:0.1.0
runtimeImagePullPolicy: Never
kubeApiserverAddress: https://198.18.0.1:6443
terminationGracePeriodSec: 10
EOF
  [ -z "$history" ] || printf 'history: {databaseFile: /etc/rest-lite/history/connection, frameworkKeptSec: 15}\n' \
    >>"$dir/config.yaml"
  cat >"$dir/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: $ns
resources:
  - ../../../deploy/rest-lite
${history:+components: [../../../deploy/rest-lite/history]}
images:
  - name: rest-lite
    newName: localhost/rest-lite
    newTag: "0.1.0"
configMapGenerator:
  - name: rest-lite-config
    behavior: replace
    files: [config.yaml]
    options: {disableNameSuffixHash: true}
patches:
  # The harness's node has no kube-proxy: the API server at the node's address.
  - target: {kind: Deployment, name: rest-lite}
    patch: |
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: KUBERNETES_SERVICE_HOST, value: 198.18.0.1}
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: KUBERNETES_SERVICE_PORT, value: "6443"}
      # The node's 2 CPUs: the two replicas and a job of two 1-CPU tasks only so.
      - op: replace
        path: /spec/template/spec/containers/0/resources/requests/cpu
        value: "0"
EOF
  echo "$dir"
}

# install NS [CONNECTION]: the server in NS; with a connection string, its job history.
install() {
  local ns=$1 connection=${2:-}
  # A namespace left by an earlier run that failed.
  kubectl delete namespace "$ns" --ignore-not-found --timeout=120s >/dev/null
  kubectl create namespace "$ns" >/dev/null
  local hash
  hash=$(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)
  printf 'users:\n  - {name: alice, tokenSha256: %s, admin: true}\n' "$hash" >"$WORK/tokens.yaml"
  kubectl -n "$ns" create secret generic rest-lite-tokens --from-file=tokens.yaml="$WORK/tokens.yaml" >/dev/null
  [ -z "$connection" ] || kubectl -n "$ns" create secret generic rest-lite-history \
    --from-literal=connection="$connection" >/dev/null
  kubectl apply -k "$(overlay "$ns" ${connection:+history})" >/dev/null
  kubectl -n "$ns" rollout status deployment/rest-lite --timeout=180s >/dev/null
}

servers() {
  kubectl -n "$1" get pods -l app.kubernetes.io/name=rest-lite \
    --field-selector=status.phase=Running -o jsonpath='{range .items[*]}{.status.podIP}{"\n"}{end}'
}

# api NS IP METHOD PATH [BODY]: the server at pod IP IP, as the Service's name.
api() {
  local ip=$2 method=$3 path=$4 body=${5:-}
  curl -sS -X "$method" -H "Host: rest-lite" -H "Authorization: Bearer $TOKEN" \
    ${body:+-H "Content-Type: application/json" --data "$body"} "http://$ip:9186$path"
}

# submit NS NAME COMMAND [TASKS]
submit() {
  local ns=$1 name=$2 command=$3 tasks=${4:-1} ip
  ip=$(servers "$ns" | sed -n 1p)
  api "$ns" "$ip" POST /api/v1/user/alice/jobs \
    "{\"jobName\":\"$name\",\"image\":\"localhost/debian:bookworm\",\"taskRoles\":[{\"name\":\"worker\",\"taskNumber\":$tasks,\"cpuNumber\":1,\"memoryMB\":256,\"command\":\"$command\"}]}" >/dev/null
}

state() {
  api "$1" "$(servers "$1" | sed -n 1p)" GET "/api/v1/user/alice/jobs/$2" | jq -r .jobStatus.state
}

wait_state() {
  local ns=$1 job=$2 want=$3 s
  for _ in $(seq 1 120); do
    s=$(state "$ns" "$job" || true)
    [ "$s" = "$want" ] && return 0
    sleep 1
  done
  fail "$job in $ns is $s, not $want"
}

task_pods() {
  kubectl -n "$1" get pods -l app.kubernetes.io/managed-by=rest-lite -o name
}

# gone NS: the namespace is deleted within 60 s.
gone() {
  local ns=$1 t0=$SECONDS
  while kubectl get namespace "$ns" >/dev/null 2>&1; do
    if [ $((SECONDS - t0)) -gt 60 ]; then
      kubectl get namespace "$ns" -o jsonpath='{.status.conditions}' >&2 || true
      kubectl -n "$ns" get pods -o custom-columns=NAME:.metadata.name,FINALIZERS:.metadata.finalizers >&2 || true
      fail "namespace $ns still there after 60 s"
    fi
    sleep 1
  done
  say "namespace $ns gone in $((SECONDS - t0)) s"
}

running_job() {
  local ns=$1
  submit "$ns" long "echo started; sleep 600"
  wait_state "$ns" long RUNNING
  for _ in $(seq 1 60); do
    kubectl -n "$ns" get pods -l app.kubernetes.io/managed-by=rest-lite \
      -o jsonpath='{.items[*].status.phase}' | grep >/dev/null Running && return 0
    sleep 1
  done
  fail "the job's pod in $ns does not run"
}

case_logs() {
  local ns=rl-logs ip log
  install "$ns"
  submit "$ns" hello "echo hello from the task; echo to stderr >&2; exit 0"
  wait_state "$ns" hello SUCCEEDED
  for _ in $(seq 1 60); do [ -z "$(task_pods "$ns")" ] && break; sleep 1; done
  [ -z "$(task_pods "$ns")" ] || fail "the task's pod is still there"
  say "job SUCCEEDED, its pod gone; no pod carries a finalizer:"
  kubectl -n "$ns" get configmaps -l app.kubernetes.io/managed-by=rest-lite -o name
  for round in "before a rolling restart" "after a rolling restart"; do
    for ip in $(servers "$ns"); do
      log=$(api "$ns" "$ip" GET "/api/v1/user/alice/jobs/hello/logs?role=worker&index=0")
      echo "$log" | grep >/dev/null "hello from the task" || fail "replica $ip ($round): $log"
      say "replica $ip ($round): $(echo "$log" | tr '\n' '|')"
    done
    if [ "$round" = "before a rolling restart" ]; then
      kubectl -n "$ns" rollout restart deployment/rest-lite >/dev/null
      kubectl -n "$ns" rollout status deployment/rest-lite --timeout=180s >/dev/null
      for _ in $(seq 1 60); do [ "$(servers "$ns" | wc -l)" = 2 ] && break; sleep 1; done
      for ip in $(servers "$ns"); do
        for _ in $(seq 1 30); do
          [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$ip:9186/readyz")" = 200 ] && break
          sleep 1
        done
      done
    fi
  done
  ip=$(servers "$ns" | sed -n 1p)
  # With their times (the kept copy: the runtime's lines' own, the others' from the line
  # before), the user's lines still told apart from the runtime's.
  log=$(api "$ns" "$ip" GET "/api/v1/user/alice/jobs/hello/logs?role=worker&index=0&timestamps=true")
  echo "$log" | grep -E >/dev/null '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z hello from the task$' \
    || fail "the log with its times: $log"
  say "with its times: $(echo "$log" | tr '\n' '|')"
  log=$(api "$ns" "$ip" GET "/api/v1/user/alice/jobs/hello/logs?role=worker&index=0&source=runtime")
  echo "$log" | grep >/dev/null "barrier passed\|passed the barrier\|\[runtime" || fail "the runtime's lines: $log"
  say "the runtime's lines kept: $(echo "$log" | wc -l) lines"
  # A stopped task keeps its log too: TERM, its exit, then the runtime's write.
  running_job "$ns"
  # A running task's log with the kubelet's times.
  log=$(api "$ns" "$ip" GET "/api/v1/user/alice/jobs/long/logs?role=worker&index=0&timestamps=true")
  echo "$log" | grep -E >/dev/null '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z started$' \
    || fail "the running task's log with the kubelet's times: $log"
  say "a running task's log with the kubelet's times: $(echo "$log" | tr '\n' '|')"
  api "$ns" "$ip" PUT /api/v1/user/alice/jobs/long/executionType '{"value":"STOP"}' >/dev/null
  wait_state "$ns" long STOPPED
  for _ in $(seq 1 60); do [ -z "$(task_pods "$ns")" ] && break; sleep 1; done
  log=$(api "$ns" "$ip" GET "/api/v1/user/alice/jobs/long/logs?role=worker&index=0")
  echo "$log" | grep >/dev/null "started" || fail "the stopped task's log: $log"
  say "a stopped task's log, its pod gone: $(echo "$log" | tr '\n' '|')"
  kubectl delete -k "$WORK/$ns" >/dev/null
  kubectl delete namespace "$ns" --wait=false >/dev/null
  gone "$ns"
}

# A throwaway PostgreSQL for the job history, on the node's address (where pods reach the
# machine), admitting the pods' network; stopped when the script ends (its EXIT trap).
postgres_for_pods() {
  local bin dir=$WORK/postgres port=55432
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -x "$bin/initdb" ] || fail "no PostgreSQL (apt-get install postgresql)"
  mkdir -p "$dir" && chown postgres "$dir"
  su postgres -s /bin/sh -c "$bin/initdb -D $dir/data -U postgres -A trust" >"$dir/initdb.log" 2>&1 \
    || fail "initdb: $(tail -3 "$dir/initdb.log")"
  printf 'local all all trust\nhost all all 198.18.0.0/24 trust\n' >"$dir/data/pg_hba.conf"
  su postgres -s /bin/sh -c "$bin/postgres -D $dir/data -p $port -k $dir -c listen_addresses=198.18.0.1" \
    >"$dir/postgres.log" 2>&1 &
  # Expanded now: this server's bin and dir.
  trap "su postgres -s /bin/sh -c '$bin/pg_ctl -D $dir/data stop -m fast' >/dev/null 2>&1 || true" EXIT
  for _ in $(seq 1 30); do
    "$bin/pg_isready" -q -h 198.18.0.1 -p "$port" && break
    sleep 1
  done
  "$bin/pg_isready" -q -h 198.18.0.1 -p "$port" || fail "PostgreSQL: $(tail -3 "$dir/postgres.log")"
  echo "postgresql://postgres@198.18.0.1:$port/postgres?sslmode=disable"
}

case_history() {
  local ns=rl-history ip log index connection
  # In this shell (not a command substitution): the server it starts, and the trap that
  # stops it, stay with the script.
  postgres_for_pods >"$WORK/connection"
  connection=$(cat "$WORK/connection")
  install "$ns" "$connection"
  submit "$ns" pair 'echo hello from task $PAI_TASK_INDEX; exit 0' 2
  wait_state "$ns" pair SUCCEEDED
  for _ in $(seq 1 60); do [ -z "$(task_pods "$ns")" ] && break; sleep 1; done
  [ -z "$(task_pods "$ns")" ] || fail "the tasks' pods are still there"
  say "a 2-task job SUCCEEDED, its pods gone"
  read_both() {
    for ip in $(servers "$ns"); do
      for index in 0 1; do
        log=$(api "$ns" "$ip" GET "/api/v1/user/alice/jobs/pair/logs?role=worker&index=$index")
        echo "$log" | grep -x >/dev/null "hello from task $index" || fail "replica $ip, task $index ($1): $log"
      done
      say "replica $ip ($1): both tasks' logs"
    done
  }
  read_both "from the kept-log ConfigMap"
  for _ in $(seq 1 120); do
    [ -z "$(kubectl -n "$ns" get frameworks -o name)" ] && break
    sleep 1
  done
  [ -z "$(kubectl -n "$ns" get frameworks -o name)" ] || fail "the Framework is still there"
  [ -z "$(kubectl -n "$ns" get configmaps -l app.kubernetes.io/managed-by=rest-lite -o name)" ] \
    || fail "a kept-log ConfigMap is still there"
  say "the Framework and its kept-log ConfigMap gone (frameworkKeptSec: 15)"
  [ "$(state "$ns" pair)" = SUCCEEDED ] || fail "the job's state from the history: $(state "$ns" pair)"
  read_both "from the job history"
  kubectl delete -k "$WORK/$ns" >/dev/null
  kubectl delete namespace "$ns" --wait=false >/dev/null
  gone "$ns"
}

# The image localhost/rest-lite-frameworks:1 in the node's containerd: busybox, this
# machine's Python with the libraries it and the packages' extensions link, and the
# packages of target/frameworks-venv where the image's python3 finds them.
frameworks_image() {
  local root=$WORK/frameworks-root version venv=$ROOT/target/frameworks-venv packages lib
  version=$(basename "$(readlink -f /usr/bin/python3)")
  packages=$venv/lib/$version/site-packages
  [ -d "$packages/jax" ] || fail "no JAX in $venv: run .ci/frameworks-venv"
  mkdir -p "$root/bin" "$root/usr/bin" "$root/usr/lib" "$root/usr/local/lib/$version/dist-packages" "$root/tmp"
  cp /bin/busybox "$root/bin/"
  for applet in $(/bin/busybox --list); do [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"; done
  cp -a "/usr/lib/$version" "$root/usr/lib/"
  cp -a "$packages/." "$root/usr/local/lib/$version/dist-packages/"
  cp "/usr/bin/$version" "$root/usr/bin/" && ln -sf "$version" "$root/usr/bin/python3"
  { echo "/usr/bin/$version"; find "$packages" "/usr/lib/$version/lib-dynload" -name '*.so*' -type f; } \
    | xargs ldd 2>/dev/null | grep -o '/[^ ]*' | grep -v "^$packages" | sort -u | while read -r lib; do
      [ -f "$lib" ] || continue
      mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib"
    done
  tar -C "$root" -cf "$WORK/frameworks-root.tar" .
  podman import -q "$WORK/frameworks-root.tar" localhost/rest-lite-frameworks:1 >/dev/null
  podman save -q --format oci-archive -o "$WORK/frameworks.oci.tar" localhost/rest-lite-frameworks:1
  podman rmi -f localhost/rest-lite-frameworks:1 >/dev/null
  ctr --address "$H/node/containerd/containerd.sock" -n k8s.io images import \
    --base-name localhost/rest-lite-frameworks "$WORK/frameworks.oci.tar" >/dev/null
  rm -rf "$root" "$WORK/frameworks-root.tar" "$WORK/frameworks.oci.tar"
}

case_jax() {
  local ns=rl-jax ip log index
  frameworks_image
  install "$ns"
  ip=$(servers "$ns" | sed -n 1p)
  # The example as it is, but for its image.
  sed 's|^image: .*|image: localhost/rest-lite-frameworks:1|' "$ROOT/examples/jax-allgather.yaml" >"$WORK/jax.yaml"
  curl -sS -X POST -H "Host: rest-lite" -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/yaml" \
    --data-binary "@$WORK/jax.yaml" "http://$ip:9186/api/v1/user/alice/jobs" >/dev/null
  wait_state "$ns" jax-allgather SUCCEEDED
  for index in 0 1; do
    log=$(api "$ns" "$ip" GET "/api/v1/user/alice/jobs/jax-allgather/logs?role=worker&index=$index")
    echo "$log" | grep -x "process $index of 2 gathered \[0, 1\]" >/dev/null || fail "task $index: $log"
    say "pod worker-$index: $(echo "$log" | grep gathered)"
  done
  kubectl delete -k "$WORK/$ns" >/dev/null
  kubectl delete namespace "$ns" --wait=false >/dev/null
  gone "$ns"
}

case_delete_k() {
  local ns=rl-delete-k
  install "$ns"
  running_job "$ns"
  say "a job runs; kubectl delete -k, then the namespace"
  kubectl delete -k "$WORK/$ns" >/dev/null
  kubectl delete namespace "$ns" --wait=false >/dev/null
  gone "$ns"
}

case_reversed() {
  local ns=rl-reversed
  install "$ns"
  running_job "$ns"
  say "a job runs; the namespace deleted first, then kubectl delete -k"
  kubectl delete namespace "$ns" --wait=false >/dev/null
  kubectl delete -k "$WORK/$ns" --ignore-not-found >/dev/null 2>&1 || true
  gone "$ns"
}

case_killed() {
  local ns=rl-killed
  install "$ns"
  running_job "$ns"
  say "a job runs; the servers killed and never replaced, then the namespace"
  kubectl -n "$ns" delete deployment rest-lite --cascade=orphan >/dev/null
  kubectl -n "$ns" delete replicaset -l app.kubernetes.io/name=rest-lite --cascade=orphan >/dev/null
  # SIGKILL, as a crash or a lost node ends it: nothing of the server's runs at its end.
  pkill -9 -f "rest-lite serve --backend=kube" || fail "no server process to kill"
  kubectl -n "$ns" delete pod -l app.kubernetes.io/name=rest-lite --grace-period=0 --force >/dev/null 2>&1
  kubectl delete namespace "$ns" --wait=false >/dev/null
  gone "$ns"
}

case_credentials() {
  local ns=rl-credentials ip code pod errors t0
  install "$ns"
  say "the server's ServiceAccount deleted while it runs"
  kubectl -n "$ns" delete serviceaccount rest-lite >/dev/null
  t0=$SECONDS
  ip=$(servers "$ns" | sed -n 1p)
  pod=$(kubectl -n "$ns" get pods -l app.kubernetes.io/name=rest-lite --field-selector=status.podIP="$ip" -o name)
  for _ in $(seq 1 90); do
    code=$(curl -s -o "$WORK/readyz" -w '%{http_code}' "http://$ip:9186/readyz" || true)
    [ "$code" = 503 ] && break
    sleep 1
  done
  [ "$code" = 503 ] || fail "/readyz answers $code"
  say "/readyz 503 after $((SECONDS - t0)) s: $(cat "$WORK/readyz")"
  sleep 70
  errors=$(kubectl -n "$ns" logs "$pod" | grep -c "server's credentials" || true)
  kubectl -n "$ns" logs "$pod" | grep "server's credentials" | cut -c1-220
  [ "$errors" -le 2 ] || fail "$errors lines about the credentials in $((SECONDS - t0)) s"
  say "$errors lines about it in $((SECONDS - t0)) s; the account made again and the pods restarted"
  kubectl apply -k "$WORK/$ns" >/dev/null
  kubectl -n "$ns" rollout restart deployment/rest-lite >/dev/null
  kubectl -n "$ns" rollout status deployment/rest-lite --timeout=180s >/dev/null
  say "ready again"
  kubectl delete -k "$WORK/$ns" >/dev/null
  kubectl delete namespace "$ns" --wait=false >/dev/null
  gone "$ns"
}

case_config() {
  local ns=rl-config ip t0 pods pod left
  install "$ns"
  for job in one two three; do submit "$ns" "$job" "echo $job"; done
  for job in one two three; do wait_state "$ns" "$job" SUCCEEDED; done
  pods=$(kubectl -n "$ns" get pods -l app.kubernetes.io/name=rest-lite -o name | sort)
  say "three jobs SUCCEEDED; the config changed: a storage added, one finished job kept"
  printf 'retention: {finishedJobs: 1}\nstorages:\n  - {name: team, claimName: team-data}\n' \
    >>"$WORK/$ns/config.yaml"
  t0=$SECONDS
  kubectl apply -k "$WORK/$ns" >/dev/null
  for pod in $pods; do
    for _ in $(seq 1 180); do
      kubectl -n "$ns" logs "$pod" | grep >/dev/null "config read again" && break
      sleep 1
    done
    kubectl -n "$ns" logs "$pod" | grep "config read again" | cut -c1-240 \
      || fail "$pod never read the config again"
    say "$pod took it $((SECONDS - t0)) s after the apply"
  done
  [ "$(kubectl -n "$ns" get pods -l app.kubernetes.io/name=rest-lite -o name | sort)" = "$pods" ] \
    || fail "the pods rolled"
  for _ in $(seq 1 60); do
    left=$(kubectl -n "$ns" get frameworks -o name | wc -l)
    [ "$left" = 1 ] && break
    sleep 1
  done
  [ "$left" = 1 ] || fail "$left Frameworks left, not 1"
  say "one finished job left, $((SECONDS - t0)) s after the apply"
  for ip in $(servers "$ns"); do
    api "$ns" "$ip" GET /api/v2/storages | jq -r '.storages[].name' | grep -x >/dev/null team \
      || fail "replica $ip does not list the storage"
  done
  say "both replicas list the storage team; the same pods serve (no restart)"
  kubectl delete -k "$WORK/$ns" >/dev/null
  kubectl delete namespace "$ns" --wait=false >/dev/null
  gone "$ns"
}

for c in $CASES; do
  say "case $c"
  "case_${c//-/_}"
done
say "all passed: $CASES"
