#!/bin/sh
# Runs in the init container (the runtime image): the task's ssh host key, when the job
# can log in (it has its own key pair, or PAI_SSH_PUB_KEY is set) and has no host key of
# its own (rest-lite gives every job one), in the shared volume, so the user image needs
# no ssh-keygen. Never fails the task: without
# ssh-keygen here, init/10-sshd.sh makes the keys in the main container if it can.
set -u
dir="${PAI_RUNTIME_ROOT:-/usr/local/pai}/ssh"
if [ -z "${PAI_SSH_PUB_KEY:-}" ] && [ ! -s "$dir/job_key.pub" ]; then
    echo "ssh: the job has no key; no host key needed"
    exit 0
fi
# Every step here runs once per task: shell builtins where they do (the runtime made
# "$dir" private already), a program only where it must.
umask 077
[ -d "$dir" ] || mkdir -p "$dir" || exit 0
# The job's own host key, installed by the runtime with the job's key pair: every task
# presents it and checks it (known_hosts); nothing to make.
if [ -s "$dir/ssh_host_ed25519_key" ] && [ -s "$dir/known_hosts" ]; then
    echo "ssh: the job's host key"
    exit 0
fi
if ! command -v ssh-keygen >/dev/null 2>&1; then
    echo "ssh: no ssh-keygen in the runtime image; host keys will be made in the main container"
    exit 0
fi
# A retried task's old key (ssh-keygen will not overwrite one).
if [ -e "$dir/ssh_host_ed25519_key" ] || [ -e "$dir/ssh_host_ed25519_key.pub" ]; then
    rm -f "$dir/ssh_host_ed25519_key" "$dir/ssh_host_ed25519_key.pub"
fi
ssh-keygen -q -t ed25519 -N '' -C "pai-task-host-key" -f "$dir/ssh_host_ed25519_key" &&
    echo "ssh: host key made"
