#!/bin/sh
# Runs in the main container, started by kube-runtime's supervisor: sshd on
# $PAI_CONTAINER_SSH_PORT for the holders of the job's key (ssh/job_key, which every task
# of the job has) and of the private half of $PAI_SSH_PUB_KEY. Sessions see the job's
# environment. Every reason not to start is one line in this log, never a failure of the
# task.
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

mkdir -p "$dir" && chmod 700 "$dir" || exit 0
if [ ! -s "$dir/ssh_host_ed25519_key" ]; then
    if ! command -v ssh-keygen >/dev/null 2>&1; then
        echo "ssh: no host key and no ssh-keygen; sshd not started"
        exit 0
    fi
    ssh-keygen -q -t ed25519 -N '' -C "pai-task-host-key" -f "$dir/ssh_host_ed25519_key" || exit 0
fi
chmod 600 "$dir/ssh_host_ed25519_key"
{
    [ -n "${PAI_SSH_PUB_KEY:-}" ] && printf '%s\n' "$PAI_SSH_PUB_KEY"
    [ -s "$dir/job_key.pub" ] && cat "$dir/job_key.pub"
} > "$dir/authorized_keys"
chmod 600 "$dir/authorized_keys"

# Sessions start here: the job's environment, then the requested command or a shell.
cat > "$dir/session.sh" <<SESSION
#!/bin/sh
. "$root/env-all.sh"
if [ -n "\${SSH_ORIGINAL_COMMAND:-}" ]; then
    exec "\${SHELL:-/bin/sh}" -c "\$SSH_ORIGINAL_COMMAND"
fi
exec "\${SHELL:-/bin/sh}" -l
SESSION
chmod 755 "$dir/session.sh"

cat > "$dir/sshd_config" <<CONFIG
Port $PAI_CONTAINER_SSH_PORT
HostKey $dir/ssh_host_ed25519_key
AuthorizedKeysFile $dir/authorized_keys
PidFile $dir/sshd.pid
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
ForceCommand $dir/session.sh
PrintMotd no
CONFIG

# Debian's sshd wants its privilege separation directory.
mkdir -p /run/sshd 2>/dev/null || true
echo "ssh: starting $sshd on port $PAI_CONTAINER_SSH_PORT"
exec "$sshd" -D -e -f "$dir/sshd_config"
