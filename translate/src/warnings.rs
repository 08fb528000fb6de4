//! What a submission answers besides "submitted": things the user should know before
//! the job fails or surprises them. None of them refuses the job.

use std::path::Path;

use pai_contract::env as names;
use pai_contract::training::{MAX_DYNAMIC_ENV_BYTES, MAX_VARIABLE_BYTES};

use crate::spec::JobSpec;

/// The longest address a task can have here (IPv4, dotted).
const ADDRESS_BYTES: usize = "255.255.255.255".len();
/// The longest port.
const PORT_BYTES: usize = "65535".len();

/// Warnings that follow from the spec alone, wherever it runs.
pub fn spec_warnings(spec: &JobSpec) -> Vec<String> {
    // What the spec asks that is not done as it asks, each naming its field.
    let mut out = spec.notes().to_vec();
    let selection = spec.framework_env();
    let generated = selection.variables();
    for (name, _) in spec.job_envs() {
        if generated.contains(&name.as_str()) {
            out.push(format!(
                "jobEnvs sets {name}: tasks get your value, not the one derived from the job (frameworkEnv)"
            ));
        }
    }

    let tasks: usize = spec.roles().iter().map(|r| r.task_number() as usize).sum();
    let mut per_task = 0usize;
    for role in spec.roles() {
        let name = role.name().as_str();
        let n = role.task_number() as usize;
        let index_bytes = n.saturating_sub(1).to_string().len();
        // PAI_HOST_IP_<role>_<i>, and per label PAI_PORT_LIST_<role>_<i>_<label> and
        // PAI_<role>_<i>_<label>_PORT (one port each at least), with NUL and `=`.
        let mut each = "PAI_HOST_IP__".len() + name.len() + index_bytes + ADDRESS_BYTES + 2;
        for port in role.ports() {
            let label = port.label.as_str().len();
            let ports = usize::from(port.count) * (PORT_BYTES + 1);
            each += "PAI_PORT_LIST___".len() + name.len() + index_bytes + label + ports + 2;
            each += "PAI____PORT".len() + name.len() + index_bytes + label + PORT_BYTES + 2;
        }
        per_task += each * n;
        let host_list = n * (ADDRESS_BYTES + 1 + PORT_BYTES + 1);
        if host_list > MAX_VARIABLE_BYTES {
            out.push(format!(
                "role {name} has {n} tasks: {} would pass Linux's {} KiB per variable, so it is not exported; it is in $PAI_RUNTIME_ROOT/peer-env.sh",
                names::task_role_host_list(name),
                MAX_VARIABLE_BYTES / 1024
            ));
        }
    }
    if per_task > MAX_DYNAMIC_ENV_BYTES {
        out.push(format!(
            "with {tasks} tasks the per-task variables (PAI_HOST_IP_<role>_<i>, PAI_<role>_<i>_<label>_PORT, …) take up to {} KiB, more than the {} KiB the runtime exports: none of them is exported; source $PAI_RUNTIME_ROOT/peer-env.sh or read peers.json",
            per_task / 1024,
            MAX_DYNAMIC_ENV_BYTES / 1024
        ));
    }
    if selection.tensorflow.is_some()
        && tasks * (ADDRESS_BYTES + PORT_BYTES + 4) > MAX_VARIABLE_BYTES
    {
        out.push(format!(
            "TF_CONFIG for {tasks} tasks would pass Linux's {} KiB per variable: it is not exported; it is in $PAI_RUNTIME_ROOT/tf_config.json",
            MAX_VARIABLE_BYTES / 1024
        ));
    }
    out
}

/// Shell words that are not programs on `PATH`.
const SHELL_WORDS: &[&str] = &[
    "!", ".", ":", "[", "{", "(", "alias", "break", "case", "cd", "command", "continue", "echo",
    "eval", "exec", "exit", "export", "false", "for", "if", "printf", "read", "readonly", "return",
    "set", "shift", "test", "times", "trap", "true", "type", "ulimit", "umask", "unset", "until",
    "wait", "while",
];

/// Roles whose command starts with a program that no directory of `path` (a `PATH`
/// value) has: on this machine the command runs on the host, not in the image.
pub fn missing_programs(spec: &JobSpec, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    for role in spec.roles() {
        let Some(program) = first_program(role.command()) else {
            continue;
        };
        let found = if program.contains('/') {
            Path::new(program).exists()
        } else {
            on_path(program, path).is_some()
        };
        if !found {
            out.push(format!(
                "role {}: its command starts {program:?}, which is not on this machine's PATH: here the command runs on this machine, not in the image",
                role.name().as_str()
            ));
        }
    }
    out
}

/// `program` (a bare name) in a directory of `path` (a `PATH` value).
pub fn on_path(program: &str, path: &str) -> Option<std::path::PathBuf> {
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.is_file())
}

/// The first word of `command`, when it plainly names a program (not a shell word, an
/// assignment, a variable or anything quoted).
fn first_program(command: &str) -> Option<&str> {
    let line = command
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))?;
    let word = line.split_whitespace().next()?;
    let plain = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '+'));
    (plain && !SHELL_WORDS.contains(&word)).then_some(word)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_contract::SpecFormat;

    fn spec(roles: &str, extra: &str) -> JobSpec {
        let text = format!(r#"{{"jobName": "j", "image": "i", "taskRoles": [{roles}]{extra}}}"#);
        JobSpec::parse(&text, SpecFormat::Json).expect("valid")
    }

    fn role(name: &str, tasks: u32, command: &str) -> String {
        format!(
            r#"{{"name": "{name}", "taskNumber": {tasks}, "cpuNumber": 1, "memoryMB": 128, "command": {}}}"#,
            serde_json::json!(command)
        )
    }

    #[test]
    fn a_program_missing_here_is_named() {
        let s = spec(
            &[
                role("a", 1, "no-such-program-x --flag"),
                role("b", 1, "sh -c 'true'"),
                role("c", 1, "set -e\nno-such-program-y"),
                role("d", 1, "  # comment\n  X=1 python"),
            ]
            .join(","),
            "",
        );
        let warnings = missing_programs(&s, "/usr/bin:/bin");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("role a: its command starts \"no-such-program-x\""));
    }

    #[test]
    fn job_envs_over_derived_variables_and_big_jobs_are_said() {
        let s = spec(
            &role("worker", 10_000, "true"),
            r#", "jobEnvs": {"MASTER_PORT": "1234"}"#,
        );
        let warnings = spec_warnings(&s);
        assert!(
            warnings[0].starts_with("jobEnvs sets MASTER_PORT"),
            "{warnings:?}"
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("PAI_TASK_ROLE_worker_HOST_LIST"))
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("none of them is exported"))
        );
        assert!(warnings.iter().any(|w| w.contains("tf_config.json")));
        let small = spec(&role("worker", 4, "true"), "");
        assert!(spec_warnings(&small).is_empty());
    }
}
