//! Docker Engine, through its API on its socket (`DOCKER_HOST`, else
//! `/var/run/docker.sock`), with bollard: one connection pool for every task, no process
//! per task. Its daemon, not a process of this server, starts each container and holds its
//! standard streams, so nothing is handed over as it is to Podman's client:
//! - the runtime, PID 1, opens the task's log itself
//!   ([`pai_contract::env::runtime::LOG_FILE`]) and rotates it as in host mode; the
//!   engine's own log driver is `none`, so the daemon keeps no second copy on its disk;
//! - the runtime binds the task's ssh port itself (the host's network), once the server
//!   has let go of it just before the start (for an instant it is free, as every other
//!   port of the task is before its process binds it).

use std::collections::HashMap;
use std::path::Path;

use bollard::Docker as Client;
use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig, ResourcesUlimits};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures::StreamExt;
use futures::future::BoxFuture;
use pai_contract::paths;

use super::driver::{Driver, LABEL_SERVER, Start, Step, Ulimit, registry_named};

/// How long a request that waits for the container or the registry may take: a task runs
/// for days, a pull of a large image for many minutes.
const LONG: std::time::Duration = std::time::Duration::from_secs(366 * 24 * 3600);

/// Docker Engine's API, as this server calls it.
#[derive(Debug)]
pub struct Docker {
    /// For requests answered at once (bollard's own 2 minutes).
    client: Client,
    /// For `wait` and pulls.
    patient: Client,
    /// The value of [`LABEL_SERVER`] for this server.
    server_label: String,
    ulimits: Vec<Ulimit>,
}

impl Docker {
    /// The engine at `DOCKER_HOST` (a `unix://` address) or the default socket, if it
    /// answers: it and its version. The API version is the lower of bollard's and the
    /// engine's, so an older engine (Debian's 20.10 speaks 1.41) is spoken to in its own.
    pub async fn find(
        host: Option<&str>,
        server_label: &str,
        ulimits: Vec<Ulimit>,
    ) -> Result<(Self, String), String> {
        let socket = host
            .filter(|h| !h.is_empty())
            .unwrap_or("unix:///var/run/docker.sock")
            .to_string();
        if !socket.starts_with("unix://") {
            return Err(format!(
                "DOCKER_HOST={socket}: only a unix:// socket of this machine is spoken to (a task's files and ports are this machine's)"
            ));
        }
        let client = Client::connect_with_unix(&socket, 120, bollard::API_DEFAULT_VERSION)
            .map_err(|e| format!("cannot connect to Docker at {socket}: {e}"))?;
        let client = client
            .negotiate_version()
            .await
            .map_err(|e| format!("Docker at {socket} does not answer: {e}"))?;
        let version = client
            .version()
            .await
            .map_err(|e| format!("Docker at {socket} does not answer: {e}"))?;
        let docker = Self {
            patient: client.clone().with_timeout(LONG),
            client,
            server_label: server_label.to_string(),
            ulimits,
        };
        Ok((
            docker,
            format!(
                "Docker {} (API {}, {socket})",
                version.version.unwrap_or_default(),
                version.api_version.unwrap_or_default()
            ),
        ))
    }

    /// The container of `step`, as `docker create` would make it.
    fn body(&self, step: &Step, runtime_binary: &Path) -> ContainerCreateBody {
        let mut binds: Vec<String> = step
            .mounts
            .iter()
            .map(|(host, inside, read_only)| bind(host, inside, *read_only))
            .collect();
        binds.push(bind(runtime_binary, paths::RUN, true));
        let memory = step.limits.memory.and_then(|m| i64::try_from(m).ok());
        let host_config = HostConfig {
            network_mode: Some("host".to_string()),
            extra_hosts: Some(vec![format!("{}:{}", step.hostname, step.address)]),
            binds: Some(binds),
            // The runtime writes the log; the daemon keeps none of its own.
            log_config: Some(bollard::models::HostConfigLogConfig {
                typ: Some("none".to_string()),
                config: None,
            }),
            nano_cpus: step.limits.cpus.map(|c| (c * 1e9).round() as i64),
            memory,
            // As much with swap: none beyond the limit, as a pod's.
            memory_swap: memory,
            shm_size: step.limits.shm.and_then(|s| i64::try_from(s).ok()),
            ulimits: Some(
                self.ulimits
                    .iter()
                    .map(|u| ResourcesUlimits {
                        name: Some(u.name.to_string()),
                        soft: Some(u.soft),
                        hard: Some(u.hard),
                    })
                    .collect(),
            ),
            // What `docker run --gpus '"device=0,1"'` asks: NVIDIA's container toolkit
            // gives the container these GPUs, and the driver's libraries.
            device_requests: (!step.gpus.is_empty()).then(|| {
                vec![DeviceRequest {
                    driver: Some("nvidia".to_string()),
                    device_ids: Some(step.gpus.iter().map(u32::to_string).collect()),
                    capabilities: Some(vec![vec!["gpu".to_string()]]),
                    ..DeviceRequest::default()
                }]
            }),
            ..HostConfig::default()
        };
        ContainerCreateBody {
            image: Some(step.image.clone()),
            hostname: Some(step.hostname.clone()),
            entrypoint: Some(vec![paths::RUN.to_string()]),
            env: Some(step.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(step.labels.iter().cloned().collect()),
            host_config: Some(host_config),
            ..ContainerCreateBody::default()
        }
    }
}

/// A bind mount as the API takes it: `host:container[:ro]`.
fn bind(host: &Path, inside: &str, read_only: bool) -> String {
    format!(
        "{}:{inside}{}",
        host.display(),
        if read_only { ":ro" } else { "" }
    )
}

/// What the engine said, without bollard's own words around it.
fn said(error: bollard::errors::Error) -> String {
    match error {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message,
        bollard::errors::Error::DockerStreamError { error } => error,
        other => other.to_string(),
    }
}

fn not_found(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// `image` as the API's `fromImage` and `tag`: a reference without a tag or digest is
/// `latest` (with none, the engine would pull every tag of the repository).
fn from_image(image: &str) -> (&str, &str) {
    let last = image.rsplit('/').next().unwrap_or(image);
    if last.contains('@') || last.contains(':') {
        (image, "")
    } else {
        (image, "latest")
    }
}

/// The registry `image` is pulled from, as a `.dockerconfigjson` names it.
fn registry_of(image: &str) -> &str {
    registry_named(image).unwrap_or("docker.io")
}

/// The job's credentials (a `.dockerconfigjson`) for `image`'s registry, if it has some.
/// Docker Hub is found under any of the names it is written with.
fn credentials(
    authfile: &Path,
    image: &str,
) -> Result<Option<bollard::auth::DockerCredentials>, String> {
    let text = std::fs::read_to_string(authfile)
        .map_err(|e| format!("cannot read the job's registry credentials: {e}"))?;
    let config: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("the job's registry credentials are not JSON: {e}"))?;
    let registry = registry_of(image);
    let hub = [
        "docker.io",
        "index.docker.io",
        "index.docker.io/v1",
        "registry-1.docker.io",
    ];
    let Some(auths) = config.get("auths").and_then(|a| a.as_object()) else {
        return Ok(None);
    };
    let entry = auths.iter().find(|(name, _)| {
        let name = name
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/');
        name == registry || (registry == "docker.io" && hub.contains(&name))
    });
    Ok(entry.map(|(name, entry)| {
        let text = |key: &str| entry.get(key).and_then(|v| v.as_str()).map(str::to_string);
        bollard::auth::DockerCredentials {
            username: text("username"),
            password: text("password"),
            auth: text("auth"),
            serveraddress: Some(name.clone()),
            ..Default::default()
        }
    }))
}

impl Driver for Docker {
    fn program(&self) -> &'static str {
        "docker"
    }

    fn hands_over(&self) -> bool {
        false
    }

    fn start<'a>(
        &'a self,
        step: &'a Step,
        runtime_binary: &'a Path,
    ) -> BoxFuture<'a, Result<Start, String>> {
        Box::pin(async move {
            let options = CreateContainerOptionsBuilder::new()
                .name(&step.name)
                .build();
            self.client
                .create_container(Some(options), self.body(step, runtime_binary))
                .await
                .map_err(|e| format!("cannot create the container {}: {}", step.name, said(e)))?;
            if let Err(e) = self.client.start_container(&step.name, None).await {
                let why = said(e);
                let _ = self.remove(std::slice::from_ref(&step.name)).await;
                return Err(format!("cannot start the container {}: {why}", step.name));
            }
            Ok(Start::Detached)
        })
    }

    fn running<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, ()> {
        // Started when the start was answered.
        Box::pin(std::future::ready(()))
    }

    fn has_image<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            match self.client.inspect_image(image).await {
                Ok(_) => Ok(true),
                Err(e) if not_found(&e) => Ok(false),
                Err(e) => Err(format!("cannot ask Docker for image {image}: {}", said(e))),
            }
        })
    }

    fn pull<'a>(
        &'a self,
        image: &'a str,
        authfile: Option<&'a Path>,
        progress: &'a (dyn Fn(&str) + Send + Sync),
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let credentials = match authfile {
                Some(file) => credentials(file, image)?,
                None => None,
            };
            let (name, tag) = from_image(image);
            let mut options = CreateImageOptionsBuilder::new().from_image(name);
            if !tag.is_empty() {
                options = options.tag(tag);
            }
            let mut stream = self
                .patient
                .create_image(Some(options.build()), None, credentials);
            while let Some(item) = stream.next().await {
                let info = item.map_err(said)?;
                let bytes = info
                    .progress_detail
                    .as_ref()
                    .and_then(|p| Some((p.current?, p.total?)))
                    .map(|(current, total)| format!("{current}/{total} bytes"));
                let line = [info.id.as_deref(), info.status.as_deref(), bytes.as_deref()]
                    .into_iter()
                    .flatten()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                if !line.is_empty() {
                    progress(&line);
                }
            }
            Ok(())
        })
    }

    fn save<'a>(&'a self, image: &'a str, archive: &'a Path) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            use tokio::io::AsyncWriteExt;
            let mut file = tokio::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(archive)
                .await
                .map_err(|e| format!("cannot write {}: {e}", archive.display()))?;
            let mut stream = self.patient.export_image(image);
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| format!("Docker's save of {image}: {}", said(e)))?;
                file.write_all(&chunk)
                    .await
                    .map_err(|e| format!("cannot write {}: {e}", archive.display()))?;
            }
            file.flush()
                .await
                .map_err(|e| format!("cannot write {}: {e}", archive.display()))
        })
    }

    fn load<'a>(&'a self, archive: &'a Path) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            use tokio::io::AsyncReadExt;
            let file = tokio::fs::File::open(archive)
                .await
                .map_err(|e| format!("cannot read {}: {e}", archive.display()))?;
            // The archive in chunks of a MiB, never whole in memory (an image can be GBs).
            let chunks = futures::stream::try_unfold(file, |mut file| async move {
                let mut chunk = vec![0u8; 1 << 20];
                let read = file.read(&mut chunk).await?;
                chunk.truncate(read);
                Ok::<_, std::io::Error>((read > 0).then(|| (bytes::Bytes::from(chunk), file)))
            });
            let options = bollard::query_parameters::ImportImageOptionsBuilder::new()
                .quiet(true)
                .build();
            let mut answers = self.patient.import_image_stream(options, chunks, None);
            while let Some(answer) = answers.next().await {
                answer
                    .map_err(|e| format!("Docker's load of {}: {}", archive.display(), said(e)))?;
            }
            Ok(())
        })
    }

    fn wait<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Option<i32>> {
        Box::pin(async move {
            let mut stream = self.patient.wait_container(name, None);
            match stream.next().await? {
                Ok(answer) => i32::try_from(answer.status_code).ok(),
                // bollard's word for a container that exited with a code other than 0.
                Err(bollard::errors::Error::DockerContainerWaitError { code, .. }) => {
                    i32::try_from(code).ok()
                }
                Err(_) => None,
            }
        })
    }

    fn kill<'a>(&'a self, name: &'a str, signal: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let options = KillContainerOptionsBuilder::new()
                .signal(&format!("SIG{signal}"))
                .build();
            self.client
                .kill_container(name, Some(options))
                .await
                .is_ok()
        })
    }

    fn remove<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let options = RemoveContainerOptionsBuilder::new().force(true).build();
            let removals = names
                .iter()
                .map(|name| self.client.remove_container(name, Some(options.clone())));
            for result in futures::future::join_all(removals).await {
                if let Err(e) = result
                    && !not_found(&e)
                {
                    tracing::warn!(error = %said(e), "cannot remove a container");
                }
            }
        })
    }

    fn image_user<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let inspected = self.client.inspect_image(image).await.map_err(said)?;
            Ok(inspected.config.and_then(|c| c.user).unwrap_or_default())
        })
    }

    fn whoami<'a>(
        &'a self,
        image: &'a str,
        runtime_binary: &'a Path,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(self.ask_whoami(image, runtime_binary))
    }

    fn names(&self, all: bool) -> BoxFuture<'_, Result<Vec<String>, String>> {
        Box::pin(async move {
            let label = format!("{LABEL_SERVER}={}", self.server_label);
            let filters = HashMap::from([("label", vec![label.as_str()])]);
            let options = ListContainersOptionsBuilder::new()
                .all(all)
                .filters(&filters)
                .build();
            let listed = self
                .client
                .list_containers(Some(options))
                .await
                .map_err(said)?;
            Ok(listed
                .into_iter()
                .filter_map(|c| c.names?.into_iter().next())
                .map(|n| n.trim_start_matches('/').to_string())
                .collect())
        })
    }
}

impl Docker {
    /// `runtime whoami` in a throwaway container of `image` (no network, the engine's
    /// default log, read back): what it printed. Removed after.
    async fn ask_whoami(&self, image: &str, runtime_binary: &Path) -> Result<String, String> {
        use bollard::query_parameters::LogsOptionsBuilder;
        let name = format!("rest-lite-whoami-{}", uuid::Uuid::new_v4());
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            entrypoint: Some(vec![
                paths::RUN.to_string(),
                paths::commands::WHOAMI.to_string(),
            ]),
            labels: Some(HashMap::from([(
                LABEL_SERVER.to_string(),
                self.server_label.clone(),
            )])),
            host_config: Some(HostConfig {
                network_mode: Some("none".to_string()),
                binds: Some(vec![bind(runtime_binary, paths::RUN, true)]),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        };
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        let asked = async {
            self.client
                .create_container(Some(options), body)
                .await
                .map_err(said)?;
            self.client
                .start_container(&name, None)
                .await
                .map_err(said)?;
            let code = self.wait(&name).await;
            let mut logs = self.client.logs(
                &name,
                Some(LogsOptionsBuilder::new().stdout(true).stderr(true).build()),
            );
            let mut said_text = String::new();
            while let Some(Ok(chunk)) = logs.next().await {
                said_text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            }
            match code {
                Some(0) => Ok(said_text),
                _ => Err(said_text),
            }
        }
        .await;
        self.remove(std::slice::from_ref(&name)).await;
        asked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_without_a_tag_is_latest_and_one_with_a_tag_or_digest_is_itself() {
        assert_eq!(
            from_image("docker.io/library/busybox"),
            ("docker.io/library/busybox", "latest")
        );
        assert_eq!(
            from_image("registry:5000/a/b:1"),
            ("registry:5000/a/b:1", "")
        );
        assert_eq!(
            from_image("registry:5000/a/b"),
            ("registry:5000/a/b", "latest")
        );
        assert_eq!(from_image("x/y@sha256:00"), ("x/y@sha256:00", ""));
    }

    #[test]
    fn the_jobs_credentials_are_those_of_the_images_registry() {
        let dir = pai_test_support::scratch("docker-auth");
        let file = dir.path().join("auth.json");
        std::fs::write(
            &file,
            r#"{"auths": {"127.0.0.1:5000": {"username": "u", "password": "p", "auth": "dTpw"},
                          "https://index.docker.io/v1/": {"username": "hub", "password": "h"}}}"#,
        )
        .expect("write");
        let local = credentials(&file, "127.0.0.1:5000/team/model:1")
            .expect("read")
            .expect("found");
        assert_eq!(local.username.as_deref(), Some("u"));
        assert_eq!(local.password.as_deref(), Some("p"));
        assert_eq!(local.serveraddress.as_deref(), Some("127.0.0.1:5000"));
        let hub = credentials(&file, "docker.io/library/perl:5")
            .expect("read")
            .expect("found");
        assert_eq!(hub.username.as_deref(), Some("hub"));
        assert!(
            credentials(&file, "quay.io/x/y:1").expect("read").is_none(),
            "another registry's are not sent"
        );
    }
}
