//! Every rule of the job spec (contracts §1), checked in one pass over the document.

use std::collections::HashMap;

use serde_json::Value;

use pai_contract::env;
use pai_contract::ports::{HTTP_LABEL, SSH_LABEL};
use pai_contract::training::{self, Part, Selection};
use pai_job::depends;
use pai_job::names::{
    FRAMEWORK_NAME_LEN, MAX_POD_NAME, MAX_TASKS_PER_FRAMEWORK, MAX_TASKS_PER_ROLE, is_label_value,
    max_task_role_name,
};

use super::error::{Errors, FieldPath, SpecErrors};
use super::names::{JobName, PortLabel, RoleName};
use super::reader::{self, Object, kind};
use super::{
    CompletionPolicy, DEFAULT_SHM_MB, JobSpec, LegacyDirs, PortRequest, PortStart, Resources,
    Retries, TaskRole,
};

use super::v1_fields;

pub(super) const I32_MAX: i64 = i32::MAX as i64;
/// Ports below this are never handed out.
const FIRST_USER_PORT: i64 = 1024;
/// OpenPAI's platform flags in `jobEnvs` (its YARN launcher read them): only variables here.
const PLATFORM_FLAGS: &[(&str, &str)] = &[
    ("isDebug", "keep a failed container for a week to debug it"),
    ("paiAzRDMA", "give the container Azure's RDMA devices"),
];

// Long: v1's fields one after another, in the order OpenPAI's docs list them; each is a few
// lines and names its own field path.
pub(super) fn job(value: &Value) -> Result<JobSpec, SpecErrors> {
    let mut errors = Errors::default();
    let mut notes = Vec::new();
    let Some(obj) = Object::new(value, FieldPath::root(), &v1_fields::JOB_NAMES, &mut errors)
    else {
        return Err(errors.into_spec_errors());
    };

    let name = obj
        .required("jobName", &mut errors)
        .and_then(|(v, p)| reader::string(v, &p, &mut errors).map(|s| (s, p)))
        .and_then(|(s, p)| JobName::parse(s).map_err(|rule| errors.push(&p, rule)).ok());

    let image = obj
        .required("image", &mut errors)
        .and_then(|(v, p)| image(v, &p, &mut errors));

    let kill_all = match obj.optional("killAllOnCompletedTaskNumber") {
        Some((v, p)) => int(v, &p, i64::MIN, i64::MAX, &mut errors).map(|n| Some((n, p))),
        None => Some(None),
    };

    let roles = obj
        .required("taskRoles", &mut errors)
        .and_then(|(v, p)| roles(v, &p, &mut errors));

    let job_envs = match obj.optional("jobEnvs") {
        Some((v, p)) => job_envs(v, &p, &mut errors, &mut notes),
        None => Some(Vec::new()),
    };

    let selection = match obj.optional("frameworkEnv") {
        Some((v, p)) => framework_env(v, &p, &mut errors),
        None => Some(Selection::all()),
    };

    let retries = match obj.optional("retryCount") {
        Some((v, p)) => int(v, &p, -2, I32_MAX, &mut errors).map(|n| match n {
            -2 => Retries::Always,
            -1 => Retries::FailuresForever,
            n => Retries::Count(n as u32),
        }),
        None => Some(Retries::Count(0)),
    };

    let mut legacy = LegacyDirs::default();
    for (key, slot) in [
        ("dataDir", &mut legacy.data_dir),
        ("outputDir", &mut legacy.output_dir),
        ("codeDir", &mut legacy.code_dir),
    ] {
        if let Some((v, p)) = obj.optional(key)
            && let Some(s) = env_text(v, &p, &mut errors)
        {
            *slot = s.to_string();
        }
    }
    // OpenPAI's virtual cluster: the gang engine's queue where it has queues (checked
    // there at submission), a name that must be `default` where there are none.
    let mut virtual_cluster = None;
    if let Some((v, p)) = obj.optional("virtualCluster")
        && let Some(s) = reader::string(v, &p, &mut errors)
        && !s.is_empty()
    {
        if is_label_value(s) {
            virtual_cluster = Some(s.to_string());
        } else {
            errors.push(
                &p,
                format!(
                    "{s:?} is not a virtual cluster's name: letters, digits, '-', '_' and '.', at most 63, starting and ending with a letter or digit"
                ),
            );
        }
    }
    let depends_on = match obj.optional("dependsOn") {
        Some((v, p)) => depends_on(v, &p, name.as_ref(), &mut errors),
        None => Vec::new(),
    };
    // Acted on where the config maps the type (warnings::gpu_type says where it is not).
    let gpu_type = match obj.optional("gpuType") {
        Some((v, p)) => reader::string(v, &p, &mut errors)
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        None => None,
    };
    if let Some((v, p)) = obj.optional("authFile")
        && let Some(s) = reader::string(v, &p, &mut errors)
        && !s.is_empty()
    {
        notes.push(format!(
            "{p}: {s:?} is not read: images are pulled with the cluster's imagePullSecrets (or a v2 spec's auth)"
        ));
    }
    if let Some((v, p)) = obj.optional("extras") {
        match v {
            Value::Object(map) if map.is_empty() => {}
            Value::Object(_) => notes.push(format!("{p}: kept in the spec, not used")),
            other => errors.push(&p, format!("must be an object, got {}", kind(other))),
        }
    }
    obj.finish(&mut errors);

    if !errors.is_empty() {
        return Err(errors.into_spec_errors());
    }
    match (name, image, roles, job_envs, retries, selection, kill_all) {
        (
            Some(name),
            Some(image),
            Some((mut roles, given_succeeded)),
            Some(job_envs),
            Some(retries),
            Some(selection),
            Some(kill_all),
        ) => {
            for (i, role) in roles.iter().enumerate() {
                let given = role.name.as_str();
                let var = env::var_part(given);
                if var != given {
                    notes.push(format!(
                        "taskRoles[{i}].name: {given:?} is {var} in variable names ({}): '-', '.' and '~' cannot be in a shell variable's name",
                        env::host_ip(given, 0)
                    ));
                }
            }
            if let Some((n, p)) = kill_all {
                notes.push(kill_all_on_completed(n, &p, &mut roles, &given_succeeded));
            }
            let path = FieldPath::root().field("frameworkEnv");
            training_ports(&mut roles, &selection, &path, &mut errors);
            if !errors.is_empty() {
                return Err(errors.into_spec_errors());
            }
            Ok(JobSpec {
                name,
                image: image.to_string(),
                roles,
                job_envs,
                retries,
                legacy,
                framework_env: selection,
                virtual_cluster,
                depends_on,
                protocol: super::Protocol::V1,
                notes,
                secrets: None,
                registry_auths: Vec::new(),
                gang_allocation: true,
                gpu_type,
                priority: None,
                storages: None,
            })
        }
        // Every reader that returns None has recorded why.
        _ => Err(SpecErrors::single(&FieldPath::root(), "is not a valid job")),
    }
}

/// `killAllOnCompletedTaskNumber`, obsolete in OpenPAI: its documentation said "the
/// number of completed tasks to kill the entire job" (its first runtime made each task
/// wait until that many had finished). FrameworkController counts per role, so each role
/// that says no `minSucceededTaskCount` of its own ends the job once `min(n, taskNumber)`
/// of its tasks succeeded: exact when the tasks that complete are one role's (a ps/worker
/// job's workers). The note says what became of it.
fn kill_all_on_completed(
    n: i64,
    path: &FieldPath,
    roles: &mut [TaskRole],
    given_succeeded: &[bool],
) -> String {
    if n <= 0 {
        return format!(
            "{path}: obsolete in OpenPAI, and {n} asks for nothing: the job ends by each role's minFailedTaskCount and minSucceededTaskCount"
        );
    }
    let mut changed = Vec::new();
    for (role, given) in roles.iter_mut().zip(given_succeeded) {
        if !given {
            let count = u32::try_from(n).unwrap_or(u32::MAX).min(role.task_number);
            role.completion.min_succeeded = Some(count);
            changed.push(format!("{} after {count}", role.name.as_str()));
        }
    }
    if changed.is_empty() {
        return format!(
            "{path}: obsolete in OpenPAI, and every role says its own minSucceededTaskCount: not used"
        );
    }
    format!(
        "{path}: obsolete in OpenPAI; the job ends once {n} tasks completed, counted per role as FrameworkController counts (minSucceededTaskCount: {}). Say it with minSucceededTaskCount on the role whose tasks end the job",
        changed.join(", ")
    )
}

/// An integer as OpenPAI's validator took it: a number, or a string holding one (Joi
/// converted `"0"` to 0).
fn int(value: &Value, path: &FieldPath, min: i64, max: i64, errors: &mut Errors) -> Option<i64> {
    match value {
        Value::String(s) => match s.trim().parse::<i64>() {
            Ok(n) => reader::integer(&Value::from(n), path, min, max, errors),
            Err(_) => reader::integer(value, path, min, max, errors),
        },
        other => reader::integer(other, path, min, max, errors),
    }
}

const DEPENDENCY_FIELDS: &[&str] = &["job", "state"];

/// `dependsOn`: a list of `{job: <name>, state: SUCCEEDED|FAILED|STOPPED}` (SUCCEEDED by
/// default), each job at most once, never the job itself, at most [`depends::MAX`].
fn depends_on(
    value: &Value,
    path: &FieldPath,
    own: Option<&JobName>,
    errors: &mut Errors,
) -> Vec<(JobName, depends::Wanted)> {
    let Some(items) = reader::list(value, path, errors) else {
        return Vec::new();
    };
    if items.len() > depends::MAX {
        errors.push(
            path,
            format!(
                "names {} jobs; at most {} may be waited for",
                items.len(),
                depends::MAX
            ),
        );
        return Vec::new();
    }
    let mut out: Vec<(JobName, depends::Wanted)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(obj) = Object::new(item, p.clone(), DEPENDENCY_FIELDS, errors) else {
            continue;
        };
        let job = obj.required("job", errors).and_then(|(v, p)| {
            let s = reader::string(v, &p, errors)?;
            match JobName::parse(s) {
                Ok(name) if own.is_some_and(|own| own.as_str() == name.as_str()) => {
                    errors.push(&p, "a job cannot wait for itself");
                    None
                }
                Ok(name) if out.iter().any(|(n, _)| n.as_str() == name.as_str()) => {
                    errors.push(&p, format!("job {s:?} is named twice"));
                    None
                }
                Ok(name) => Some(name),
                Err(rule) => {
                    errors.push(&p, rule);
                    None
                }
            }
        });
        let state = match obj.optional("state") {
            Some((v, p)) => reader::string(v, &p, errors).and_then(|s| {
                let wanted = depends::Wanted::parse(s);
                if wanted.is_none() {
                    errors.push(&p, format!("{s:?} is not SUCCEEDED, FAILED or STOPPED"));
                }
                wanted
            }),
            None => Some(depends::Wanted::Succeeded),
        };
        obj.finish(errors);
        if let (Some(job), Some(state)) = (job, state) {
            out.push((job, state));
        }
    }
    out
}

/// `frameworkEnv`: a list of `tensorflow`, `pytorch`, `mpi`, `jax`, `xgboost`, each at
/// most once, where `tensorflow` may be `{tensorflow: {portLabel: <label>}}`.
fn framework_env(value: &Value, path: &FieldPath, errors: &mut Errors) -> Option<Selection> {
    let items = reader::list(value, path, errors)?;
    let before = errors.len();
    let mut selection = Selection::none();
    let mut seen = Vec::new();
    let names: Vec<&'static str> = Part::ALL.iter().map(|p| p.as_str()).collect();
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let (name, options) = match item {
            Value::String(s) => (s.as_str(), None),
            Value::Object(map) if map.len() == 1 => {
                let (k, v) = map.iter().next().expect("one entry");
                (k.as_str(), Some((v, p.field(k))))
            }
            other => {
                errors.push(
                    &p,
                    format!(
                        "must be one of {} or {{tensorflow: {{portLabel: <label>}}}}, got {}",
                        names.join(", "),
                        kind(other)
                    ),
                );
                continue;
            }
        };
        let Some(part) = Part::parse(name) else {
            let hint = reader::suggest(name, &names)
                .map(|n| format!(" (did you mean {n:?}?)"))
                .unwrap_or_default();
            errors.push(
                &p,
                format!("{name:?} is not one of {}{hint}", names.join(", ")),
            );
            continue;
        };
        if seen.contains(&part) {
            errors.push(&p, format!("{name:?} is listed twice"));
            continue;
        }
        seen.push(part);
        match part {
            Part::Tensorflow => {
                let mut label = HTTP_LABEL.to_string();
                if let Some((v, op)) = options {
                    let Some(obj) = Object::new(v, op, &["portLabel"], errors) else {
                        continue;
                    };
                    if let Some((v, lp)) = obj.optional("portLabel")
                        && let Some(s) = reader::string(v, &lp, errors)
                    {
                        match PortLabel::parse(s) {
                            Ok(l) => label = l.as_str().to_string(),
                            Err(rule) => errors.push(&lp, rule),
                        }
                    }
                    obj.finish(errors);
                }
                selection.tensorflow = Some(label);
            }
            Part::Pytorch | Part::Mpi | Part::Jax | Part::Xgboost => {
                if let Some((_, op)) = options {
                    errors.push(
                        &op,
                        format!("{name} takes no options: write it as a plain string"),
                    );
                    continue;
                }
                selection.ask(part);
            }
        }
    }
    (errors.len() == before).then_some(selection)
}

/// The ports the parts need: the leading role gets a `master` port for PyTorch, a `jax`
/// port for JAX's coordinator and an `xgboost` port for XGBoost's tracker, each unless it
/// has one; TensorFlow's label must be a port of every role in its cluster.
pub(super) fn training_ports(
    roles: &mut [TaskRole],
    selection: &Selection,
    path: &FieldPath,
    errors: &mut Errors,
) {
    if let Some(label) = &selection.tensorflow {
        for role in roles.iter() {
            if training::is_tf_evaluator(role.name.as_str())
                || role.ports.iter().any(|p| p.label.as_str() == label)
            {
                continue;
            }
            errors.push(
                path,
                format!(
                    "TF_CONFIG addresses every task by its port {label:?}, and role {:?} has none: add it to the role's portList or name another label",
                    role.name.as_str()
                ),
            );
        }
    }
    let leader = training::master_role(roles.iter().map(|r| r.name.as_str()));
    let Some(role) = roles.get_mut(leader) else {
        return;
    };
    for wanted in selection.leader_ports() {
        if !role.ports.iter().any(|p| p.label.as_str() == wanted)
            && let Ok(label) = PortLabel::parse(wanted)
        {
            role.ports.push(PortRequest {
                label,
                count: 1,
                start: PortStart::Any,
            });
        }
    }
}

/// The job's image as OpenPAI took it: any text. Where an image is pulled, one that no
/// registry can name (white space: a template's `<your image name>`) is refused for
/// that place ([`crate::place::check`]); this machine pulls none.
pub(super) fn image<'a>(
    value: &'a Value,
    path: &FieldPath,
    errors: &mut Errors,
) -> Option<&'a str> {
    let s = reader::text(value, path, errors)?;
    if s.chars().any(char::is_control) {
        errors.push(
            path,
            format!("{s:?} is not an image reference: it holds a control character"),
        );
        return None;
    }
    Some(s)
}

/// A string that can be an environment value: anything but NUL.
fn env_text<'a>(value: &'a Value, path: &FieldPath, errors: &mut Errors) -> Option<&'a str> {
    let s = reader::string(value, path, errors)?;
    if s.contains('\0') {
        errors.push(path, "must not contain a NUL character");
        return None;
    }
    Some(s)
}

/// The roles, and for each whether it says its own `minSucceededTaskCount`.
fn roles(
    value: &Value,
    path: &FieldPath,
    errors: &mut Errors,
) -> Option<(Vec<TaskRole>, Vec<bool>)> {
    let items = reader::list(value, path, errors)?;
    if items.is_empty() {
        errors.push(path, "must list at least one role");
        return None;
    }
    let before = errors.len();
    let given_succeeded: Vec<bool> = items
        .iter()
        .map(|v| v.get("minSucceededTaskCount").is_some())
        .collect();
    let parsed: Vec<Option<TaskRole>> = items
        .iter()
        .enumerate()
        .map(|(i, v)| role(v, &path.index(i), errors))
        .collect();

    // Names must stay distinct as given and as task-role names. Checked on every
    // well-formed name, also of roles with other errors: every broken rule at once.
    let names: Vec<Option<RoleName>> = items
        .iter()
        .map(|v| v.get("name").and_then(Value::as_str))
        .map(|name| name.and_then(|n| RoleName::parse(n).ok()))
        .collect();
    let mut given: HashMap<&str, usize> = HashMap::new();
    let mut kube: HashMap<&str, usize> = HashMap::new();
    for (i, name) in names.iter().enumerate() {
        let Some(name) = name else { continue };
        let name_path = path.index(i).field("name");
        if let Some(first) = given.insert(name.as_str(), i) {
            errors.push(
                &name_path,
                format!(
                    "duplicate role name {:?} (also taskRoles[{first}])",
                    name.as_str()
                ),
            );
        } else if let Some(&first) = kube.get(name.task_role()) {
            let other = names[first]
                .as_ref()
                .map(|r| r.as_str())
                .unwrap_or_default();
            errors.push(
                &name_path,
                format!(
                    "{:?} and taskRoles[{first}].name {other:?} both become the task-role name {:?} (lower-case, without '_')",
                    name.as_str(),
                    name.task_role()
                ),
            );
        }
        kube.entry(name.task_role()).or_insert(i);
    }

    let total: u64 = parsed
        .iter()
        .flatten()
        .map(|r| u64::from(r.task_number))
        .sum();
    if total > u64::from(MAX_TASKS_PER_FRAMEWORK) {
        errors.push(
            path,
            format!(
                "the job has {total} tasks; FrameworkController runs at most {MAX_TASKS_PER_FRAMEWORK} in one Framework"
            ),
        );
    }
    if errors.len() > before {
        return None;
    }
    parsed
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .map(|roles| (roles, given_succeeded))
}

fn role(value: &Value, path: &FieldPath, errors: &mut Errors) -> Option<TaskRole> {
    let obj = Object::new(value, path.clone(), &v1_fields::ROLE_NAMES, errors)?;
    let before = errors.len();

    let name = obj
        .required("name", errors)
        .and_then(|(v, p)| reader::string(v, &p, errors).map(|s| (s, p)))
        .and_then(|(s, p)| {
            RoleName::parse(s)
                .map_err(|rule| errors.push(&p, rule))
                .ok()
        });
    // OpenPAI's defaults: one task of one CPU and 100 MB.
    let task_number = match obj.optional("taskNumber") {
        Some((v, p)) => int(v, &p, 1, i64::from(MAX_TASKS_PER_ROLE), errors),
        None => Some(1),
    };
    if let (Some(name), Some(tasks)) = (&name, task_number) {
        pod_names_fit(name, tasks, &path.field("name"), errors);
    }
    let cpu = match obj.optional("cpuNumber") {
        Some((v, p)) => int(v, &p, 1, I32_MAX, errors),
        None => Some(1),
    };
    let memory_mb = match obj.optional("memoryMB") {
        Some((v, p)) => int(v, &p, 1, I32_MAX, errors),
        None => Some(100),
    };
    let shm_mb = match obj.optional("shmMB") {
        Some((v, p)) => int(v, &p, 1, I32_MAX, errors).and_then(|shm| match memory_mb {
            Some(mem) if shm > mem => {
                errors.push(&p, format!("must be at most memoryMB ({mem}), got {shm}"));
                None
            }
            _ => Some(shm),
        }),
        None => Some(i64::from(DEFAULT_SHM_MB).min(memory_mb.unwrap_or(i64::MAX))),
    };
    let gpu = match obj.optional("gpuNumber") {
        Some((v, p)) => int(v, &p, 0, I32_MAX, errors),
        None => Some(0),
    };
    let ports = match obj.optional("portList") {
        Some((v, p)) => port_list(v, &p, errors),
        None => Some(Vec::new()),
    }
    .map(with_implicit_ports);
    let command = obj
        .required("command", errors)
        .and_then(|(v, p)| reader::text(v, &p, errors));
    // Absent: 1 (a role whose task fails fails the job); null: failed tasks never fail it.
    let min_failed = match obj.given("minFailedTaskCount") {
        false => Some(Some(1)),
        true => min_count(&obj, "minFailedTaskCount", task_number, errors),
    };
    let min_succeeded = min_count(&obj, "minSucceededTaskCount", task_number, errors);
    obj.finish(errors);

    if errors.len() > before {
        return None;
    }
    Some(TaskRole {
        name: name?,
        task_number: task_number? as u32,
        resources: Resources {
            cpu: cpu? as u32,
            memory_mb: memory_mb? as u32,
            shm_mb: shm_mb? as u32,
            gpu: gpu? as u32,
        },
        ports: ports?,
        command: command?.to_string(),
        completion: CompletionPolicy {
            min_failed: min_failed?,
            min_succeeded: min_succeeded?,
        },
        image: None,
    })
}

/// `Some(None)` for null or absent, `Some(Some(n))` for `1 ≤ n ≤ taskNumber`, `None` on error.
fn min_count(
    obj: &Object<'_>,
    key: &str,
    task_number: Option<i64>,
    errors: &mut Errors,
) -> Option<Option<u32>> {
    let Some((v, p)) = obj.optional(key) else {
        return Some(None);
    };
    let n = int(v, &p, 1, I32_MAX, errors)?;
    match task_number {
        Some(tasks) if n > tasks => {
            errors.push(&p, format!("must be at most taskNumber ({tasks}), got {n}"));
            None
        }
        _ => Some(Some(n as u32)),
    }
}

fn port_list(value: &Value, path: &FieldPath, errors: &mut Errors) -> Option<Vec<PortRequest>> {
    let items = reader::list(value, path, errors)?;
    let before = errors.len();
    let mut out: Vec<(usize, PortRequest)> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item_path = path.index(i);
        let Some(request) = port_request(item, &item_path, errors) else {
            continue;
        };
        if out.iter().any(|(_, r)| r.label == request.label) {
            errors.push(
                &item_path.field("label"),
                format!("duplicate label {:?}", request.label.as_str()),
            );
            continue;
        }
        if let Some((range, (_, other))) = explicit_range(&request).and_then(|range| {
            out.iter()
                .find(|(_, o)| explicit_range(o).is_some_and(|r| overlaps(range, r)))
                .map(|found| (range, found))
        }) {
            let theirs = explicit_range(other).unwrap_or(range);
            errors.push(
                &item_path.field("beginAt"),
                format!(
                    "ports {}–{} overlap those of label {:?} ({}–{})",
                    range.0,
                    range.1,
                    other.label.as_str(),
                    theirs.0,
                    theirs.1
                ),
            );
            continue;
        }
        out.push((i, request));
    }
    (errors.len() == before).then(|| out.into_iter().map(|(_, r)| r).collect())
}

fn port_request(value: &Value, path: &FieldPath, errors: &mut Errors) -> Option<PortRequest> {
    let obj = Object::new(value, path.clone(), &v1_fields::PORT_NAMES, errors)?;
    let before = errors.len();
    let label = obj
        .required("label", errors)
        .and_then(|(v, p)| reader::string(v, &p, errors).map(|s| (s, p)))
        .and_then(|(s, p)| {
            PortLabel::parse(s)
                .map_err(|rule| errors.push(&p, rule))
                .ok()
        });
    let count = match obj.optional("portNumber") {
        Some((v, p)) => int(v, &p, 1, 65535 - FIRST_USER_PORT + 1, errors),
        None => Some(1),
    };
    let start = match obj.optional("beginAt") {
        Some((v, p)) => match v
            .as_i64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        {
            Some(0) => Some(PortStart::Any),
            Some(n) if (FIRST_USER_PORT..=65535).contains(&n) => match count {
                Some(c) if n + c - 1 > 65535 => {
                    errors.push(
                        &obj.path("portNumber"),
                        format!("ports {n}–{} run past 65535", n + c - 1),
                    );
                    None
                }
                _ => Some(PortStart::At(n as u16)),
            },
            _ => {
                let got = match v {
                    Value::Number(n) => n.to_string(),
                    other => kind(other).to_string(),
                };
                errors.push(
                    &p,
                    format!(
                        "must be 0 (any port) or a port from {FIRST_USER_PORT} to 65535, got {got}"
                    ),
                );
                None
            }
        },
        None => Some(PortStart::Any),
    };
    obj.finish(errors);
    if errors.len() > before {
        return None;
    }
    Some(PortRequest {
        label: label?,
        count: count? as u16,
        start: start?,
    })
}

fn explicit_range(request: &PortRequest) -> Option<(u32, u32)> {
    match request.start {
        PortStart::At(first) => {
            let first = u32::from(first);
            Some((first, first + u32::from(request.count) - 1))
        }
        PortStart::Any => None,
    }
}

fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// Every role gets one `http` and one `ssh` port unless it asks for them itself.
pub(super) fn with_implicit_ports(mut ports: Vec<PortRequest>) -> Vec<PortRequest> {
    for label in [HTTP_LABEL, SSH_LABEL] {
        if !ports.iter().any(|p| p.label.as_str() == label)
            && let Ok(label) = PortLabel::parse(label)
        {
            ports.push(PortRequest {
                label,
                count: 1,
                start: PortStart::Any,
            });
        }
    }
    ports
}

fn job_envs(
    value: &Value,
    path: &FieldPath,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> Option<Vec<(String, String)>> {
    let Value::Object(map) = value else {
        errors.push(
            path,
            format!("must be an object of names to values, got {}", kind(value)),
        );
        return None;
    };
    let before = errors.len();
    let mut out = Vec::with_capacity(map.len());
    for (name, v) in map {
        let p = path.field(name);
        if !env::is_shell_identifier(name) {
            errors.push(
                &p,
                "the name must be a shell identifier: ^[A-Za-z_][A-Za-z0-9_]*$",
            );
            continue;
        }
        if env::is_reserved(name) {
            errors.push(
                &p,
                format!(
                    "the name is reserved: FrameworkController sets {}* variables, and the runtime reads USER_CMD, KUBE_APISERVER_ADDRESS and its own settings ({}*, …)",
                    env::FC_PREFIX,
                    env::runtime::PREFIX,
                ),
            );
            continue;
        }
        let rendered = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            other => {
                errors.push(
                    &p,
                    format!("must be a string, number or boolean, got {}", kind(other)),
                );
                continue;
            }
        };
        if rendered.contains('\0') {
            errors.push(&p, "must not contain a NUL character");
            continue;
        }
        if env::is_set_by_platform(name) {
            notes.push(format!(
                "{p}: the platform sets {name} itself; tasks get the platform's value, not this one"
            ));
        }
        if let Some((_, meant)) = PLATFORM_FLAGS.iter().find(|(flag, _)| flag == name) {
            notes.push(format!(
                "{p}: OpenPAI's platform flag ({meant}) is only a variable here"
            ));
        }
        out.push((name.clone(), rendered));
    }
    out.sort();
    (errors.len() == before).then_some(out)
}

/// Pods are named `<framework>-<task role>-<index>` and must fit a DNS label; the
/// Framework's name has a fixed length, so the room left is the role's.
pub(super) fn pod_names_fit(
    name: &RoleName,
    task_number: i64,
    path: &FieldPath,
    errors: &mut Errors,
) {
    let tasks = u32::try_from(task_number).unwrap_or(MAX_TASKS_PER_ROLE);
    let room = max_task_role_name(tasks);
    let kube = name.task_role();
    if kube.len() > room {
        errors.push(
            path,
            format!(
                "its task-role name {kube:?} is {} characters; with taskNumber {tasks} at most {room} fit, since pod names (<{FRAMEWORK_NAME_LEN}-character job id>-<role>-<index>) are at most {MAX_POD_NAME}: shorten the role name",
                kube.len()
            ),
        );
    }
}
