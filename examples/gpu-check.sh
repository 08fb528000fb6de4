#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and PyTorch: a job holding every GPU of the machine,
# whose PyTorch must see exactly the devices it was given (by UUID), and a second job of
# one GPU that waits, WAITING with the reason, until the first ends, then runs on a freed
# one. Prints what each job saw and how long each step took; exits non-zero when a check
# fails. Skips (exit 0, "SKIPPED") on a machine without nvidia-smi's GPUs or PyTorch.
#   REST_LITE=target/release/rest-lite examples/gpu-check.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rest_lite=${REST_LITE:-rest-lite}
port=${GPU_CHECK_PORT:-19286}
if ! gpus=$(nvidia-smi -L 2>/dev/null) || [ -z "$gpus" ]; then
  echo "SKIPPED: no NVIDIA GPU here (nvidia-smi -L)"
  exit 0
fi
if ! python3 -c 'import torch' 2>/dev/null; then
  echo "SKIPPED: python3 has no PyTorch"
  exit 0
fi
n=$(printf '%s\n' "$gpus" | wc -l)
work=$(mktemp -d)
export REST_LITE_STATE_DIR=$work/state
server=http://127.0.0.1:$port
"$rest_lite" serve --backend local --engine host --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
serve_pid=$!
trap 'kill $serve_pid 2>/dev/null; wait $serve_pid 2>/dev/null; echo "--- server log"; cat "$work/serve.log"; rm -rf "$work"' EXIT
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f s", b - a }'; }
# Polls `status JOB` until its output matches PATTERN (at most 120 s).
until_status() {
  local job=$1 pattern=$2 i
  for i in $(seq 1 600); do
    if "$rest_lite" status "$job" --server "$server" 2>/dev/null | grep -Eq "$pattern"; then
      return 0
    fi
    sleep 0.2
  done
  echo "FAILED: $job never matched $pattern"; "$rest_lite" status "$job" --server "$server" || true
  exit 1
}
for i in $(seq 1 100); do
  "$rest_lite" jobs --server "$server" >/dev/null 2>&1 && break
  sleep 0.1
done
echo "machine: $n GPU(s)"; printf '%s\n' "$gpus"
grep -E "GPU [0-9]+ GPU-|no GPU" "$work/serve.log" | sed 's/^/server: /'

# The first job: every GPU of the machine, held until $work/release exists.
sed -e 's/^jobName: pytorch-gpu/jobName: holds-all/' -e "s/gpuNumber: 1/gpuNumber: $n/" \
  "$here/pytorch-gpu.yaml" >"$work/first.yaml"
printf 'jobEnvs:\n  HOLD_FILE: %s\n' "$work/release" >>"$work/first.yaml"
sed -e 's/^jobName: pytorch-gpu/jobName: waits-for-one/' "$here/pytorch-gpu.yaml" >"$work/second.yaml"

t=$(now)
"$rest_lite" submit "$work/first.yaml" --server "$server"
until_status holds-all "RUNNING"
for i in $(seq 1 600); do
  "$rest_lite" logs holds-all --role worker --server "$server" 2>/dev/null | grep -q "^matmul" && break
  sleep 0.2
done
echo "holds-all: running, its PyTorch done in $(since "$t"):"
"$rest_lite" logs holds-all --role worker --server "$server" | sed 's/^/  /'
"$rest_lite" logs holds-all --role worker --server "$server" | grep -q "^devices=$n " || { echo "FAILED: holds-all did not see $n devices"; exit 1; }

t=$(now)
"$rest_lite" submit "$work/second.yaml" --server "$server"
until_status waits-for-one "WAITING"
echo "waits-for-one (submitted while holds-all runs):"
"$rest_lite" status waits-for-one --server "$server" | sed -n '1,3p' | sed 's/^/  /'
"$rest_lite" status waits-for-one --server "$server" | grep -q "needs 1 GPU, 0 free (held by" || { echo "FAILED: no GPU reason"; exit 1; }

touch "$work/release"
t=$(now)
until_status holds-all "SUCCEEDED"
until_status waits-for-one "SUCCEEDED"
echo "waits-for-one: SUCCEEDED $(since "$t") after holds-all was released:"
"$rest_lite" logs waits-for-one --role worker --server "$server" | sed 's/^/  /'
"$rest_lite" status waits-for-one --server "$server" | sed 's/^/  /'
echo "PASSED"
