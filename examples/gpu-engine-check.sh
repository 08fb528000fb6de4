#!/usr/bin/env bash
# On a machine with NVIDIA GPUs, NVIDIA's container toolkit and a container engine
# (Docker Engine, or Podman with the CDI specs of `nvidia-ctk cdi generate`): tasks in
# their image get exactly the GPUs the server gave them, through the engine (Docker's
# device request, what `--gpus` sends; Podman's CDI names `nvidia.com/gpu=N`). Runs, in
# an image made here from the host's own programs (no registry needed), a job of one GPU
# and then a job of every GPU; each task must see with nvidia-smi (which the toolkit puts
# in the container) exactly the devices it was told, by UUID (NVIDIA_VISIBLE_DEVICES).
# Prints what each saw and how long each took; exits non-zero when a check fails. Skips
# (exit 0, "SKIPPED") where a GPU, the toolkit or the engine is missing.
#   REST_LITE=target/release/rest-lite ENGINE=docker examples/gpu-engine-check.sh
set -euo pipefail
rest_lite=${REST_LITE:-rest-lite}
engine=${ENGINE:-docker}
port=${GPU_CHECK_PORT:-19287}
image=localhost/rest-lite-gpu-check:1
if ! gpus=$(nvidia-smi -L 2>/dev/null) || [ -z "$gpus" ]; then
  echo "SKIPPED: no NVIDIA GPU here (nvidia-smi -L)"
  exit 0
fi
if ! command -v nvidia-container-cli >/dev/null && ! command -v nvidia-ctk >/dev/null; then
  echo "SKIPPED: NVIDIA's container toolkit is not installed (nvidia-container-cli, nvidia-ctk)"
  exit 0
fi
if ! "$engine" info >/dev/null 2>&1; then
  echo "SKIPPED: $engine does not answer ($engine info)"
  exit 0
fi
n=$(printf '%s\n' "$gpus" | wc -l)
work=$(mktemp -d)
export REST_LITE_STATE_DIR=$work/state
server=http://127.0.0.1:$port
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f s", b - a }'; }

# The image: the host's sh and the few programs the command uses, with their libraries.
root=$work/rootfs
mkdir -p "$root/tmp" "$root/etc"
echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
for program in sh cat tr sort sleep env mkdir rm ls id chmod cut sed grep head tail wc; do
  path=$(command -v "$program")
  cp -L --parents "$path" "$root"
  ldd "$path" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
    [ -e "$lib" ] && cp -L --parents "$lib" "$root"
  done
done
[ -e "$root/bin/sh" ] || { mkdir -p "$root/bin"; ln -s "$(command -v sh)" "$root/bin/sh"; }
tar -C "$root" -cf "$work/rootfs.tar" .
"$engine" import "$work/rootfs.tar" "$image" >/dev/null

engine_runtime=()
[ "$engine" = podman ] && command -v runc >/dev/null && engine_runtime=(--engine-runtime runc)
"$rest_lite" serve --backend local --engine "$engine" "${engine_runtime[@]}" \
  --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
serve_pid=$!
trap 'kill $serve_pid 2>/dev/null; wait $serve_pid 2>/dev/null; echo "--- server log"; cat "$work/serve.log"; "$engine" rmi "$image" >/dev/null 2>&1; rm -rf "$work"' EXIT
for i in $(seq 1 100); do
  "$rest_lite" jobs --server "$server" >/dev/null 2>&1 && break
  sleep 0.1
done
echo "machine: $n GPU(s), engine $engine"; printf '%s\n' "$gpus"
grep -E "GPU [0-9]+ GPU-|no GPU|in their images" "$work/serve.log" | sed 's/^/server: /'

# A job of `gpus` GPUs whose one task compares what it sees with what it was told.
job() {
  cat <<YAML
jobName: $1
image: $image
taskRoles:
  - name: worker
    taskNumber: 1
    cpuNumber: 1
    memoryMB: 512
    gpuNumber: $2
    command: |
      seen=\$(nvidia-smi --query-gpu=uuid --format=csv,noheader | tr -d ' ' | sort | tr '\n' ' ')
      given=\$(echo "\$NVIDIA_VISIBLE_DEVICES" | tr ',' '\n' | sort | tr '\n' ' ')
      echo "seen=\$seen"
      echo "given=\$given CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES"
      [ "\$seen" = "\$given" ]
YAML
}
for gpus_asked in 1 "$n"; do
  name=gpus-$gpus_asked
  job "$name" "$gpus_asked" >"$work/$name.yaml"
  t=$(now)
  if ! "$rest_lite" submit "$work/$name.yaml" --server "$server" --follow >"$work/$name.out" 2>&1; then
    cat "$work/$name.out"
  fi
  echo "$name: $(since "$t") to its end:"
  "$rest_lite" logs "$name" --role worker --server "$server" | sed 's/^/  /'
  "$rest_lite" status "$name" --server "$server" | sed 's/^/  /'
  "$rest_lite" status "$name" --server "$server" | grep -q SUCCEEDED ||
    { echo "FAILED: $name did not see exactly its $gpus_asked GPU(s)"; exit 1; }
  seen=$("$rest_lite" logs "$name" --role worker --server "$server" | sed -n 's/^seen=//p' | wc -w)
  [ "$seen" = "$gpus_asked" ] || { echo "FAILED: $name saw $seen GPU(s), asked $gpus_asked"; exit 1; }
done
echo "PASSED"
