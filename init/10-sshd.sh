#!/bin/sh
# Runs in the main container, started by kube-runtime's supervisor: sshd on
# $PAI_CONTAINER_SSH_PORT for the holders of the job's key (ssh/job_key, which every task
# of the job has) and of the private half of $PAI_SSH_PUB_KEY. Sessions see the job's
# environment. Every reason not to start is one line in this log, never a failure of the
# task. When the supervisor holds the port ($PAI_SSH_ON_DEMAND), it runs this script at
# the first connection, not at the task's start: this prepares sshd and names it in
# ssh/sshd.path, and the supervisor starts `sshd -i` for each connection; nothing of ssh
# runs until someone connects. Otherwise this runs at the start and runs sshd itself.
set -u
root="${PAI_RUNTIME_ROOT:-/usr/local/pai}"
dir="$root/ssh"

if [ -z "${PAI_SSH_PUB_KEY:-}" ] && [ ! -s "$dir/job_key.pub" ]; then
    echo "ssh: the job has no key (no job key, no PAI_SSH_PUB_KEY in jobEnvs); sshd not started"
    exit 0
fi
if [ -z "${PAI_CONTAINER_SSH_PORT:-}" ]; then
    echo "ssh: PAI_CONTAINER_SSH_PORT is not set; sshd not started"
    exit 0
fi
sshd=$(command -v sshd 2>/dev/null || true)
[ -n "$sshd" ] || for candidate in /usr/sbin/sshd /usr/local/sbin/sshd; do
    [ -x "$candidate" ] && sshd=$candidate && break
done
if [ -z "$sshd" ]; then
    echo "ssh: this image has no sshd (install openssh-server to use ssh); sshd not started"
    exit 0
fi

# Every step here runs once per task: shell builtins where they do (the runtime made
# "$dir" private already; umask makes every file below private), a program only where
# it must (ssh-keygen when prep/ could not, and sshd).
umask 077
[ -d "$dir" ] || mkdir -p "$dir" || exit 0
if [ ! -s "$dir/ssh_host_ed25519_key" ]; then
    if ! command -v ssh-keygen >/dev/null 2>&1; then
        echo "ssh: no host key and no ssh-keygen; sshd not started"
        exit 0
    fi
    ssh-keygen -q -t ed25519 -N '' -C "pai-task-host-key" -f "$dir/ssh_host_ed25519_key" || exit 0
fi
{
    [ -n "${PAI_SSH_PUB_KEY:-}" ] && printf '%s\n' "$PAI_SSH_PUB_KEY"
    if [ -s "$dir/job_key.pub" ]; then
        while IFS= read -r line || [ -n "$line" ]; do
            printf '%s\n' "$line"
        done < "$dir/job_key.pub"
    fi
} > "$dir/authorized_keys"

# Sessions start here: the job's environment, then the requested command or a shell.
printf '%s\n' \
    '#!/bin/sh' \
    ". \"$root/env-all.sh\"" \
    'if [ -n "${SSH_ORIGINAL_COMMAND:-}" ]; then' \
    '    exec "${SHELL:-/bin/sh}" -c "$SSH_ORIGINAL_COMMAND"' \
    'fi' \
    'exec "${SHELL:-/bin/sh}" -l' > "$dir/session.sh"

# On the address the task was given (the embedded default's), never wider.
listen="${PAI_RUNTIME_BIND_ADDRESS:-}"
printf '%s\n' \
    "Port $PAI_CONTAINER_SSH_PORT" \
    ${listen:+"ListenAddress $listen"} \
    "HostKey $dir/ssh_host_ed25519_key" \
    "AuthorizedKeysFile $dir/authorized_keys" \
    "PidFile $dir/sshd.pid" \
    "PubkeyAuthentication yes" \
    "PasswordAuthentication no" \
    "KbdInteractiveAuthentication no" \
    "PermitRootLogin prohibit-password" \
    "StrictModes no" \
    "UsePAM no" \
    "ForceCommand /bin/sh $dir/session.sh" \
    "PrintMotd no" > "$dir/sshd_config"

# Debian's sshd wants its privilege separation directory.
[ -d /run/sshd ] || mkdir -p /run/sshd 2>/dev/null || true
if [ -n "${PAI_SSH_ON_DEMAND:-}" ]; then
    printf '%s\n' "$sshd" > "$dir/sshd.path"
    echo "ssh: $sshd starts for each connection to port $PAI_CONTAINER_SSH_PORT (on demand)"
    exit 0
fi
echo "ssh: starting $sshd on port $PAI_CONTAINER_SSH_PORT"
exec "$sshd" -D -e -f "$dir/sshd_config"
