//! `GET …/ssh` and `GET …/ssh/key`: which tasks one can log in to now, and with what.
//!
//! A task is listed only when its sshd answers: the server connects to the task's
//! address and `ssh` port and reads sshd's greeting (`SSH-2.0-…`). Every other task is
//! listed with the reason it cannot be reached, so that nobody is sent to a port that
//! ends in "Connection refused".

use std::time::Duration;

use futures::StreamExt;
use pai_api::ssh::{SshContainer, SshInfo, SshUnavailable};
use tokio::io::AsyncReadExt;

use pai_contract::framework::MAIN_CONTAINER;
use pai_contract::ports::SSH_LABEL;
use pai_contract::training;

use super::error::ApiError;
use super::extract::Job;
use crate::state::AppState;
use pai_api::status::JobState;

/// How long the server waits for one task's sshd to greet it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Tasks probed at once.
const PROBES_IN_FLIGHT: usize = 64;
/// How long one `GET …/ssh` probes in all: tasks not reached by then are listed as not
/// probed, so a large job's answer (and the connections it opens) stays bounded.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(10);

/// Probes every running task; 404 `NoJobSshInfoError` when none can be logged in to,
/// naming the reasons.
// Long: probes every running task and words each reason it cannot be logged in to, as one
// answer.
pub async fn ssh_info(state: &AppState, job: &Job) -> Result<SshInfo, ApiError> {
    let job_key = state
        .backend
        .ssh_key(job.name(), training::JOB_KEY_FILE)
        .await?
        .is_some();
    let user_key = has_user_key(job);
    let user = state.backend.task_user();
    let made = state.views.of(&job.framework);
    let view = &made.view;
    let mut unavailable = Vec::new();
    let mut candidates = Vec::new();
    for (role, r) in &view.task_roles {
        for t in &r.task_statuses {
            let id = format!("{role}-{}", t.task_index);
            let reason = if !job_key && !user_key {
                Some(
                    "the job has no key pair (it was submitted before rest-lite made one) and no PAI_SSH_PUB_KEY in jobEnvs: its sshd does not start".to_string(),
                )
            } else if t.task_state != JobState::Running {
                Some(format!(
                    "the task is {}: sshd runs only while the task runs",
                    t.task_state.to_string().to_lowercase()
                ))
            } else {
                None
            };
            let address = t.container_ip.clone().zip(
                t.container_ports
                    .get(SSH_LABEL)
                    .and_then(|p| p.split(',').next().map(str::to_string)),
            );
            match (reason, address) {
                (Some(reason), _) => unavailable.push(SshUnavailable { id, reason }),
                (None, None) => unavailable.push(SshUnavailable {
                    id,
                    reason: "the task has no address or no ssh port yet".to_string(),
                }),
                (None, Some((ip, port))) => candidates.push(SshContainer {
                    id,
                    task_role: role.clone(),
                    task_index: t.task_index,
                    ssh_ip: ip,
                    ssh_port: port,
                    ssh_user: user.clone(),
                }),
            }
        }
    }
    let deadline = tokio::time::Instant::now() + PROBE_DEADLINE;
    let probed: Vec<(SshContainer, Result<(), String>)> = futures::stream::iter(candidates)
        .map(|c| async move {
            let result = tokio::time::timeout_at(deadline, probe(&c.ssh_ip, &c.ssh_port))
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "not probed: the request's {} s for probing ran out (the job has many tasks); ask again, or log in to it by its alias from another task",
                        PROBE_DEADLINE.as_secs()
                    ))
                });
            (c, result)
        })
        .buffered(PROBES_IN_FLIGHT)
        .collect()
        .await;
    let mut containers = Vec::new();
    for (container, result) in probed {
        match result {
            Ok(()) => containers.push(container),
            Err(e) => unavailable.push(SshUnavailable {
                reason: format!(
                    "nothing answers ssh at {}:{} ({e}): the task's image may have no sshd (install openssh-server in it; a running task looks again 10 s after a refused connection), and the task's runtime lines and its init-10-sshd.sh.log say why",
                    container.ssh_ip, container.ssh_port
                ),
                id: container.id,
            }),
        }
    }
    if containers.is_empty() {
        let mut reasons: Vec<String> = unavailable
            .iter()
            .take(3)
            .map(|u| format!("{}: {}", u.id, u.reason))
            .collect();
        if unavailable.len() > 3 {
            reasons.push(format!("and {} more", unavailable.len() - 3));
        }
        let why = if reasons.is_empty() {
            "it has no tasks".to_string()
        } else {
            format!("no task can be logged in to now; {}", reasons.join("; "))
        };
        return Err(ApiError::no_ssh(job.user.as_str(), &job.job, &why));
    }
    Ok(SshInfo {
        containers,
        unavailable,
        private_key_url: job_key.then(|| format!("{}/ssh/key", job.url())),
        host_key: state
            .backend
            .ssh_key(job.name(), training::JOB_HOST_PUBLIC_KEY_FILE)
            .await?
            .map(|key| key.trim().to_string()),
    })
}

/// The job's private key; 404 `NoJobSshInfoError` for a job without a key pair.
pub async fn private_key(state: &AppState, job: &Job) -> Result<String, ApiError> {
    state
        .backend
        .ssh_key(job.name(), training::JOB_KEY_FILE)
        .await?
        .ok_or_else(|| {
            ApiError::no_ssh(
                job.user.as_str(),
                &job.job,
                "the job has no key pair (it was submitted before rest-lite made one)",
            )
        })
}

/// True when the job's `jobEnvs` has `PAI_SSH_PUB_KEY`.
fn has_user_key(job: &Job) -> bool {
    job.framework.spec.task_roles.iter().any(|role| {
        role.task
            .pod
            .spec
            .iter()
            .flat_map(|spec| &spec.containers)
            .filter(|c| c.name == MAIN_CONTAINER)
            .flat_map(|c| c.env.iter().flatten())
            .any(|v| {
                v.name == pai_contract::env::SSH_PUB_KEY
                    && v.value.as_deref().is_some_and(|k| !k.is_empty())
            })
    })
}

/// Connects to `ip:port` and reads the greeting every SSH server sends first.
async fn probe(ip: &str, port: &str) -> Result<(), String> {
    let port: u16 = port.parse().map_err(|_| format!("port {port:?}"))?;
    let greeting = async {
        let mut stream = tokio::net::TcpStream::connect((ip, port))
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = [0u8; 4];
        stream
            .read_exact(&mut buf)
            .await
            .map_err(|e| format!("no greeting: {e}"))?;
        if &buf == b"SSH-" {
            Ok(())
        } else {
            Err("what listens there is not an SSH server".to_string())
        }
    };
    tokio::time::timeout(PROBE_TIMEOUT, greeting)
        .await
        .map_err(|_| format!("no answer within {} s", PROBE_TIMEOUT.as_secs()))?
}
