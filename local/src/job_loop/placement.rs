//! Where an attempt's tasks go on this machine and how each starts: the slots and GPUs it
//! asks for ([`need_of`]), its ports, pods and addresses ([`place`]), and each task's two
//! steps with their environment, on the host or in containers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use pai_contract::framework::{Framework, FrameworkAttemptStatus, INIT_CONTAINER};
use pai_contract::meta;

use crate::job::{Inner, Job, uid};
use crate::lifecycle::Placement;
use crate::ports;
use crate::task::{self, Identity, Launch};

/// Where tasks of this machine are: their address, and the one their ports are bound on.
pub(crate) const LOCAL_ADDRESS: std::net::Ipv4Addr = std::net::Ipv4Addr::LOCALHOST;

/// The init container's environment for this machine: the files holding the
/// environment are private to the server's user (a pod's template asks for 644, for a
/// main container that may run as another user), and the job's key pair is read from
/// the job's directory.
fn init_env(inner: &Inner, job: &str, mut env: Vec<(String, String)>) -> Vec<(String, String)> {
    use pai_contract::training::{JOB_KEY_FILE, JOB_SSH_DIR_VAR};
    // In container mode the main container's user is the image's: the files are for it,
    // as the pod template says (the directories above are private all the same).
    let private = inner.isolation.engine().is_none();
    env.retain(|(name, _)| {
        (!private || name != pai_contract::env::ENV_FILE_MODE) && name != JOB_SSH_DIR_VAR
    });
    // The key pair is a file of the job's directory here, not a Secret's volume.
    let keys = inner.store.job_key_dir(job);
    if keys.join(JOB_KEY_FILE).exists() {
        env.push((JOB_SSH_DIR_VAR.to_string(), keys.display().to_string()));
    }
    env
}

/// Gives every task of the current attempt its ports (the Framework's annotation), pod
/// and address; returns where each is and how to start it.
pub(super) type Placed = (Vec<Placement>, Vec<(String, u32, Launch)>);

/// The GPUs of each task of an attempt, by role and index.
pub(super) type TaskGpus = BTreeMap<(String, u32), Vec<crate::gpus::GpuDevice>>;

/// What `framework`'s current attempt asks of this machine: a slot per task, the GPUs its
/// pods' main containers ask for (of its `gpuType`), those its tasks held before first.
pub(crate) fn need_of(framework: &Framework) -> crate::slots::Need {
    let annotations = framework.metadata.annotations.clone().unwrap_or_default();
    let job = match (
        annotations.get(meta::ANNOTATION_USER),
        annotations.get(meta::ANNOTATION_JOB),
    ) {
        (Some(user), Some(job)) => format!("{user}~{job}"),
        _ => framework.metadata.name.clone().unwrap_or_default(),
    };
    crate::slots::Need {
        job,
        tasks: framework
            .spec
            .task_roles
            .iter()
            .flat_map(|role| {
                let gpus = role.gpu_count();
                (0..role.tasks()).map(move |index| (role.name.clone(), index, gpus))
            })
            .collect(),
        gpu_type: annotations.get(meta::ANNOTATION_GPU_TYPE).cloned(),
        before: crate::gpus::Assignment::of(framework),
        priority: pai_contract::priority::JobPriority::ranked(framework),
    }
}

pub(super) fn place(inner: &Inner, job: &Job, gpus: &Option<TaskGpus>) -> Result<Placed, String> {
    // A copy: binding a port per task takes a while for a large job, and the job's
    // readers (its status, the job list) must not wait for it. Only this job_loop changes
    // the attempt and its tasks, so what is read from the copy stays current.
    let framework = job.framework().clone();
    // The files of attempts older than the kept ones go before this one's come.
    let name = framework.metadata.name.clone().unwrap_or_default();
    let pruned =
        inner
            .store
            .prune_attempts(&name, framework.attempt_id(), inner.settings.kept_attempts);
    if pruned > 0 {
        tracing::debug!(job = %name, pruned, "removed old attempts' files");
    }
    let allocation = ports::allocate(&framework, &inner.ports)
        .map_err(|e| format!("no free ports on this machine: {e}"))?;
    let own_ports = &allocation.ports;
    Arc::make_mut(&mut job.framework())
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            meta::ANNOTATION_TASK_PORTS.to_string(),
            own_ports.to_annotation(),
        );

    // Each task's pod: how to start it, and the UIDs its status shows.
    let mut launches = Vec::new();
    let mut pods = Vec::new();
    for role in &framework.spec.task_roles {
        let role_of = RoleOf::new(inner, &framework, role);
        for index in 0..role.tasks() {
            let pod_uid = uid();
            let held = allocation.held(&role.name, index);
            let launch = role_of.launch(inner, index, &pod_uid, held, own_ports, gpus)?;
            pods.push(Placement {
                role: role.name.clone(),
                index,
                pod_uid,
                address: LOCAL_ADDRESS.to_string(),
                node: "localhost".to_string(),
            });
            launches.push((role.name.clone(), index, launch));
        }
    }
    Ok((pods, launches))
}

/// Between TERM and KILL for a task of `pod`: its `terminationGracePeriodSeconds`, else
/// the server's default.
pub(super) fn grace_of(
    inner: &Inner,
    pod: Option<&k8s_openapi::api::core::v1::PodSpec>,
) -> Duration {
    pod.and_then(|p| p.termination_grace_period_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .map_or(inner.settings.default_grace, Duration::from_secs)
}

/// A task started again: its role, index and launch, or why it cannot be.
pub(super) type Relaunched = Result<(String, u32, Launch), (String, u32, String)>;

/// The launches of the open attempt's tasks `again` (role, index, pod UID), which a
/// previous server left in their init step: the same pod, ports (held again) and GPUs
/// as their peers were told. A task that cannot have them again is returned with why.
pub(super) fn launch_again(
    inner: &Inner,
    framework: &Framework,
    again: Vec<(String, u32, String)>,
    gpus: &Option<TaskGpus>,
) -> Vec<Relaunched> {
    let own_ports = framework.task_ports();
    let mut launches = Vec::with_capacity(again.len());
    for (role_name, index, pod_uid) in again {
        let Some(role) = framework
            .spec
            .task_roles
            .iter()
            .find(|r| r.name == role_name)
        else {
            launches.push(Err((role_name, index, "its task role is gone".to_string())));
            continue;
        };
        let launch = inner
            .ports
            .hold(own_ports.of(role, index).all_ports())
            .map_err(|e| format!("cannot hold its ports again: {e}"))
            .and_then(|held| {
                RoleOf::new(inner, framework, role)
                    .launch(inner, index, &pod_uid, held, &own_ports, gpus)
            });
        launches.push(match launch {
            Ok(launch) => Ok((role_name, index, launch)),
            Err(message) => Err((role_name, index, message)),
        });
    }
    launches
}

/// What every task of one role of the open attempt shares: its pod, its init and main
/// containers, its grace, and the UIDs its tasks' environment names.
struct RoleOf<'a> {
    framework: &'a Framework,
    role: &'a pai_contract::framework::TaskRoleSpec,
    attempt: i32,
    attempt_uid: String,
    role_uid: String,
    pod: k8s_openapi::api::core::v1::PodSpec,
    init: k8s_openapi::api::core::v1::Container,
    main: k8s_openapi::api::core::v1::Container,
    grace: Duration,
}

impl<'a> RoleOf<'a> {
    fn new(
        inner: &Inner,
        framework: &'a Framework,
        role: &'a pai_contract::framework::TaskRoleSpec,
    ) -> Self {
        let no_attempt = FrameworkAttemptStatus::default();
        let attempt_status = framework
            .status
            .as_ref()
            .map_or(&no_attempt, |s| &s.attempt_status);
        let role_uid = attempt_status
            .task_role_statuses
            .iter()
            .flatten()
            .find(|r| r.name == role.name)
            .and_then(|r| r.instance_uid.clone())
            .unwrap_or_default();
        let pod = role.task.pod.spec.clone().unwrap_or_default();
        let init = pod
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == INIT_CONTAINER)
            .cloned()
            .unwrap_or_default();
        let main = role.main_container().cloned().unwrap_or_default();
        let grace = grace_of(inner, Some(&pod));
        Self {
            framework,
            role,
            attempt: attempt_status.id,
            attempt_uid: attempt_status.instance_uid.clone().unwrap_or_default(),
            role_uid,
            pod,
            init,
            main,
            grace,
        }
    }

    /// How to start task `index`, whose pod is `pod_uid`, holding `held` of its ports
    /// (`own_ports`, every task's) and its GPUs of `gpus`.
    // Long: a task's two steps and environment in order, as the kubelet would build them
    // from the pod; container mode's additions at the end.
    fn launch(
        &self,
        inner: &Inner,
        index: u32,
        pod_uid: &str,
        held: ports::HeldPorts,
        own_ports: &pai_contract::TaskPorts,
        gpus: &Option<TaskGpus>,
    ) -> Result<Launch, String> {
        let framework = self.framework;
        let role = self.role;
        let name = framework.metadata.name.clone().unwrap_or_default();
        let attempt = self.attempt;
        let identity = Identity {
            namespace: framework.metadata.namespace.clone().unwrap_or_default(),
            framework: name.clone(),
            framework_uid: framework.metadata.uid.clone().unwrap_or_default(),
            attempt,
            attempt_uid: self.attempt_uid.clone(),
            role: role.name.clone(),
            role_uid: self.role_uid.clone(),
            index,
            task_uid: uid(),
            task_attempt_uid: pai_contract::framework::instance_uid(0, pod_uid),
            pod_name: pai_contract::framework::pod_name(&name, &role.name, index),
            pod_uid: pod_uid.to_string(),
        };
        let fc = identity.fc_env();
        let root = inner.store.task_root(&name, attempt, &role.name, index);
        let ssh_port = own_ports
            .role(&role.name)
            .get(index as usize)
            .and_then(|plan| plan.first(pai_contract::ports::SSH_LABEL));
        let mut launch = Launch {
            runtime: inner.settings.runtime.clone(),
            root: root.clone(),
            assets: inner.assets.clone(),
            peers_file: inner.store.peers_file(&name, attempt),
            pid_record: inner.store.pid_file(&name, attempt, &role.name, index),
            host_env: inner.host_env.clone(),
            init_env: {
                let mut env = init_env(inner, &name, task::container_env(fc.clone(), &self.init));
                env.push((
                    pai_contract::env::runtime::SHARED_DIR.to_string(),
                    inner.store.shared_dir(&name, attempt).display().to_string(),
                ));
                // Bound by this server until the main container starts.
                env.push((
                    pai_contract::env::runtime::PORTS_HELD.to_string(),
                    "1".to_string(),
                ));
                env
            },
            main_env: {
                let mut env = task::container_env(fc, &self.main);
                // Its ports on its own address; the ssh port handed over on stdin.
                env.push((
                    pai_contract::env::runtime::BIND_ADDRESS.to_string(),
                    LOCAL_ADDRESS.to_string(),
                ));
                env
            },
            grace: self.grace,
            spawner: inner.spawner.clone(),
            cpu_group: inner.cpu_group.clone(),
            gpus: Vec::new(),
            logs: inner.logs.clone(),
            ports: held,
            ssh_port,
            containers: None,
        };
        if let Some(gpus) = gpus {
            let devices = gpus
                .get(&(role.name.clone(), index))
                .map_or(&[][..], Vec::as_slice);
            launch.main_env.extend(crate::gpus::task_env(
                devices,
                inner.isolation.engine().is_some(),
            ));
            launch.gpus = devices.to_vec();
        }
        match inner.isolation.engine() {
            Some(engine) => {
                let storages = crate::storages::bind_mounts(
                    &self.pod,
                    &self.main,
                    &inner.settings.storages.current(),
                )?;
                in_containers(&mut launch, engine, &identity, &self.pod, &self.main);
                if let Some(containers) = launch.containers.as_mut() {
                    containers.main.mounts.extend(storages);
                }
            }
            None => {
                // The host's file system is not the task's: nothing at /job/hostfile.
                launch
                    .main_env
                    .retain(|(name, _)| name != pai_contract::training::JOB_HOSTFILE_VAR);
                // The runtime writes the task's result here, as the kubelet's file.
                launch.main_env.push((
                    pai_contract::env::runtime::TERMINATION_LOG.to_string(),
                    root.join(pai_contract::results::TERMINATION_LOG_NAME)
                        .display()
                        .to_string(),
                ));
            }
        }
        Ok(launch)
    }
}

/// A task of container mode: its init step as in host mode but with the static runtime
/// (the cluster's init image holds the same binary), its main container in its image with
/// the task's directory as the pod's volume, the kubelet's termination-log file, and the
/// role's limits.
fn in_containers(
    launch: &mut Launch,
    engine: &Arc<crate::containers::Engine>,
    identity: &Identity,
    pod: &k8s_openapi::api::core::v1::PodSpec,
    main: &k8s_openapi::api::core::v1::Container,
) {
    use crate::containers::{LABEL_JOB, LABEL_POD_UID, LABEL_SERVER, Step};
    use pai_contract::paths::RUNTIME_ROOT;
    launch.runtime = task::Runtime::binary(&engine.runtime_binary);
    let image = crate::containers::normalize_image(main.image.as_deref().unwrap_or_default());
    launch.init_env.push((
        pai_contract::env::runtime::MAIN_ROOT.to_string(),
        RUNTIME_ROOT.to_string(),
    ));
    let root = &launch.root;
    launch.containers = Some(task::Containers {
        engine: engine.clone(),
        main: Step {
            name: crate::containers::main_name(&identity.pod_uid),
            image: image.clone(),
            hostname: identity.pod_name.clone(),
            address: LOCAL_ADDRESS.into(),
            labels: vec![
                (LABEL_SERVER.to_string(), engine.server_label.clone()),
                (LABEL_JOB.to_string(), identity.framework.clone()),
                (LABEL_POD_UID.to_string(), identity.pod_uid.clone()),
            ],
            mounts: vec![
                (root.clone(), RUNTIME_ROOT.to_string(), false),
                (
                    root.join(pai_contract::results::TERMINATION_LOG_NAME),
                    pai_contract::results::KUBELET_TERMINATION_LOG.to_string(),
                    false,
                ),
            ],
            env_file: (
                root.join(crate::containers::ENV_FILE),
                format!("{RUNTIME_ROOT}/{}", crate::containers::ENV_FILE),
            ),
            env: vec![(
                pai_contract::env::runtime::ENV_FROM.to_string(),
                format!("{RUNTIME_ROOT}/{}", crate::containers::ENV_FILE),
            )],
            limits: container_limits(pod, main),
            gpus: launch.gpus.iter().map(|d| d.index).collect(),
            user: engine.known_user(&image).filter(|(uid, _)| *uid != 0),
        },
    });
}

/// The main container's CPU and memory limits and the pod's `/dev/shm` size.
fn container_limits(
    pod: &k8s_openapi::api::core::v1::PodSpec,
    main: &k8s_openapi::api::core::v1::Container,
) -> crate::containers::Limits {
    use crate::containers::quantity;
    let limit = |name: &str| {
        main.resources
            .as_ref()?
            .limits
            .as_ref()?
            .get(name)
            .and_then(|q| quantity(&q.0))
    };
    let shm = pod
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.empty_dir.as_ref())
        .find(|d| d.medium.as_deref() == Some("Memory"))
        .and_then(|d| d.size_limit.as_ref())
        .and_then(|q| quantity(&q.0));
    crate::containers::Limits {
        cpus: limit("cpu").filter(|c| *c > 0.0),
        memory: limit("memory").map(|m| m as u64).filter(|m| *m > 0),
        shm: shm.map(|s| s as u64).filter(|s| *s > 0),
    }
}
