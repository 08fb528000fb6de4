//! What to do next, after an error: one line under it, for every error the command line
//! prints. The most specific step that fits, by the error's kind (its code, for the API's
//! errors; never its words), else the step for its kind: a spec, a config, a file, the
//! connection, an error the command line refused with itself ([`Refusal`]).

use pai_client::{ClientError, ErrorCode};
use pai_translate::config::ConfigError;
use pai_translate::spec::SpecErrors;

/// An error the command line itself answers with, carrying the next step it knows (a
/// `logs` that does not say which task, of a job with several).
#[derive(Debug)]
pub struct Refusal {
    /// What is wrong, as printed after `error:`.
    pub message: String,
    /// What to do next, as printed after `hint:`.
    pub hint: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

/// The next step for `error`: always one (a fallback per kind where nothing specific
/// fits). `spec`: the command sent a job spec (a 400 is then about it), and whether that
/// spec fails `rest-lite transform` here too (where it does not, a 400 is about what it
/// asks of the server's place, and the message names that); `job` its name where known;
/// `server_here`: the server is on this machine (a loopback address).
pub fn next_step(
    error: &anyhow::Error,
    spec: Option<bool>,
    job: Option<&str>,
    server_here: bool,
) -> Option<String> {
    let chain = || error.chain();
    if let Some(refusal) = chain().find_map(|e| e.downcast_ref::<Refusal>()) {
        return Some(refusal.hint.clone());
    }
    if let Some(client) = chain().find_map(|e| e.downcast_ref::<ClientError>()) {
        let asked = Asked {
            spec,
            job,
            server_here,
        };
        return Some(client_step(client, &asked));
    }
    Some(local_step(error))
}

/// What the command sent, and where, for the step after a server's answer.
struct Asked<'a> {
    spec: Option<bool>,
    job: Option<&'a str>,
    server_here: bool,
}

impl Asked<'_> {
    /// The job's name as one shell word, else `JOB`.
    fn job(&self) -> String {
        self.job
            .map_or_else(|| "JOB".to_string(), super::human::shell_word)
    }
}

/// After an error of the server or of the way to it.
fn client_step(error: &ClientError, asked: &Asked<'_>) -> String {
    match error {
        ClientError::Api {
            code, token_sent, ..
        } => api_step(*code, *token_sent, asked),
        ClientError::Transport { .. } => "is a server running there? Start one with `rest-lite serve` (it runs jobs on this machine without a cluster), or give another one's address with --server or REST_LITE_SERVER".to_string(),
        ClientError::Cut(_) => "the server closed the connection before its answer ended (did it restart?): run the command again".to_string(),
        ClientError::Answer(_) => "the server does not answer as this rest-lite's API says: check that --server names a rest-lite server of this version (`rest-lite --version` here, its /api/v1/openapi.json there)".to_string(),
        ClientError::Tls(_) => "an https:// server's certificate must be one this machine trusts: give its CA certificate with --ca-cert or REST_LITE_CA_CERT, and the server's name as its certificate names it".to_string(),
    }
}

/// After an error answer of the API, by its code: every code has its own step.
fn api_step(code: ErrorCode, token_sent: bool, asked: &Asked<'_>) -> String {
    match code {
        ErrorCode::UnauthorizedUserError => unauthorized_step(token_sent, asked.server_here),
        ErrorCode::NoJobError => "`rest-lite jobs` lists your jobs; --user names another user's".to_string(),
        ErrorCode::NoJobSshInfoError => format!(
            "`rest-lite logs {} -r ROLE --runtime` shows a task's runtime lines, which say why it has no ssh; an image needs openssh-server",
            asked.job()
        ),
        ErrorCode::NoTaskError => "`rest-lite status JOB` lists its tasks, each as ROLE-INDEX (give them with -r ROLE -i INDEX)".to_string(),
        ErrorCode::NoLogError => format!(
            "`rest-lite status {}` shows how the task and its attempt ended, and why",
            asked.job()
        ),
        ErrorCode::NoTagError => "a job's tags are in its status (jobStatus.tags): name one it has".to_string(),
        ErrorCode::NoStorageError => "GET /api/v2/storages lists the storages you may use; the server's operator names them in its config (storages:)".to_string(),
        ErrorCode::ConflictJobError if asked.spec.is_some() => format!(
            "a job keeps its name until it is deleted: change jobName, or `rest-lite delete {}` first",
            asked.job.map_or_else(|| "NAME".to_string(), super::human::shell_word)
        ),
        ErrorCode::ConflictJobError => format!(
            "`rest-lite status {}` shows where the job stands now, which the message says is at odds with what was asked",
            asked.job()
        ),
        ErrorCode::InvalidParametersError => invalid_step(asked.spec),
        ErrorCode::PayloadTooLargeError => "the server takes a body up to the size the message says: move large files out of the spec (a codeDir, a team storage) and name them there".to_string(),
        ErrorCode::UnsupportedMediaTypeError => "rest-lite sends JSON or YAML: check that --server names a rest-lite server".to_string(),
        ErrorCode::ForbiddenHostError => "give --server the server's own address (or localhost); its operator lets other names in with --public-url".to_string(),
        ErrorCode::ForbiddenOriginError => "a job is changed from the server's own pages or from a program (which sends no Origin): use its portal, or the command line".to_string(),
        ErrorCode::ForbiddenUserError => "another user's jobs need an admin's token: leave out --user to act as yourself, or give an admin's token with --token".to_string(),
        ErrorCode::ServiceUnavailableError => "the server cannot reach its cluster; `rest-lite run SPEC` runs the job on this machine instead".to_string(),
        ErrorCode::NotFoundError | ErrorCode::MethodNotAllowedError => "check that --server names a rest-lite server of this version (`rest-lite --version`): its API is under /api/v1".to_string(),
        ErrorCode::UnknownError => "the server failed on its side: its log says why (the standard error of `rest-lite serve`, or ask its operator); run the command again once that is mended".to_string(),
    }
}

/// After a 401: which token to give.
fn unauthorized_step(token_sent: bool, server_here: bool) -> String {
    if token_sent {
        "the token given (--token or REST_LITE_TOKEN) is not this server's: check it, or ask its operator for one (`rest-lite token`)".to_string()
    } else if server_here {
        // A server of this machine keeps its token in its state directory, sent only when
        // that directory records it serving at this address.
        "a server of this machine that made its own token keeps it in its state directory: name the directory it was started with (its --state-dir) with --state-dir or REST_LITE_STATE_DIR, and its token is sent; a server with a token file wants yours with --token or REST_LITE_TOKEN (the message above says which this one is)".to_string()
    } else {
        "this server wants a token: give yours with --token or REST_LITE_TOKEN (its operator makes one with `rest-lite token`)".to_string()
    }
}

/// After a 400: about the spec sent, what it asks of the server's place, or a parameter.
fn invalid_step(spec: Option<bool>) -> String {
    match spec {
        Some(true) => "`rest-lite transform SPEC` checks a spec without a server".to_string(),
        // A spec that becomes a Framework here was refused for the server's own limits
        // (the task limit of this machine, its GPUs, storages), which the message names.
        Some(false) => "the spec itself is valid: ask less of what the message names (a limit of this server's, its GPUs or storages), or ask the server's operator for more".to_string(),
        None => "the message names the argument and its rule; `rest-lite help COMMAND` shows what each argument takes".to_string(),
    }
}

/// After an error of this machine: a spec, a config, a file, or anything else.
fn local_step(error: &anyhow::Error) -> String {
    let chain = || error.chain();
    if chain().any(|e| e.is::<SpecErrors>()) {
        return "correct each field named above (docs/reference.md, \"The job spec\", gives every field and its rule); `rest-lite transform SPEC` checks the spec again without a server".to_string();
    }
    if let Some(config) = chain().find_map(|e| e.downcast_ref::<ConfigError>()) {
        return match config {
            ConfigError::Read { .. } => "check the path given with --config or REST_LITE_CONFIG: a relative one is from the directory rest-lite runs in".to_string(),
            ConfigError::Parse { .. } | ConfigError::Invalid { .. } => "correct the config field named above (every field, its default and its rule: deploy/rest-lite/config.yaml); an empty file is the defaults".to_string(),
        };
    }
    if let Some(io) = chain().find_map(|e| e.downcast_ref::<std::io::Error>()) {
        return match io.kind() {
            std::io::ErrorKind::NotFound => "check the path named above: a relative one is from the directory rest-lite runs in (`-` reads a spec from standard input)".to_string(),
            std::io::ErrorKind::PermissionDenied => "check who may read or write the path named above (`ls -ld` it): rest-lite acts as you".to_string(),
            _ => "the system's reason is above: mend what it names (a full disk, a directory where a file should be) and run the command again".to_string(),
        };
    }
    "`rest-lite help COMMAND` shows what the command takes; RUST_LOG=debug shows the steps that led here".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: ErrorCode, token_sent: bool) -> anyhow::Error {
        anyhow::Error::new(ClientError::Api {
            status,
            code,
            message: "whatever the words".into(),
            token_sent,
        })
        .context("submitting the job")
    }

    fn hint(e: &anyhow::Error, spec: Option<bool>) -> String {
        next_step(e, spec, None, false).unwrap_or_default()
    }

    #[test]
    fn hints_follow_the_code_and_what_was_sent_never_the_words() {
        let refused = api(400, ErrorCode::InvalidParametersError, true);
        assert!(hint(&refused, Some(true)).contains("rest-lite transform SPEC"));
        assert!(
            hint(&refused, None).contains("names the argument"),
            "a 400 of a read is no spec's"
        );
        assert!(
            hint(&refused, Some(false)).contains("the spec itself is valid"),
            "a spec that transforms was refused for what it asks of the place: its message says"
        );
        assert!(
            hint(&api(401, ErrorCode::UnauthorizedUserError, true), None)
                .contains("is not this server's")
        );
        assert!(
            hint(&api(401, ErrorCode::UnauthorizedUserError, false), None)
                .contains("wants a token")
        );
        assert!(
            hint(&api(409, ErrorCode::ConflictJobError, true), Some(false))
                .contains("change jobName")
        );
        // A server of this machine: its state directory holds the token.
        assert!(
            next_step(
                &api(401, ErrorCode::UnauthorizedUserError, false),
                None,
                None,
                true
            )
            .unwrap_or_default()
            .contains("its --state-dir")
        );
        // The job's own name, not a placeholder, where the spec gave it.
        assert!(
            next_step(
                &api(409, ErrorCode::ConflictJobError, true),
                Some(false),
                Some("mnist"),
                false
            )
            .unwrap_or_default()
            .contains("`rest-lite delete mnist`")
        );
        assert!(
            next_step(
                &api(404, ErrorCode::NoLogError, true),
                None,
                Some("my job"),
                false
            )
            .unwrap_or_default()
            .contains("`rest-lite status 'my job'` shows how the task and its attempt ended")
        );
    }

    /// Every code of the API (as its OpenAPI document lists them: a new one is there
    /// too) has a step of its own, not the fallback of errors without a kind.
    #[test]
    fn every_error_code_has_its_own_hint() {
        let document = pai_server::openapi::document();
        let codes = document["components"]["schemas"]["ErrorCode"]["enum"]
            .as_array()
            .expect("the codes in the OpenAPI document");
        assert!(codes.len() >= 18, "{codes:?}");
        let fallback = local_step(&anyhow::anyhow!("something"));
        for name in codes {
            let code: ErrorCode = serde_json::from_value(name.clone()).expect("a code");
            assert_eq!(code.as_str(), name, "{name} reads as a code of its own");
            for spec in [None, Some(true), Some(false)] {
                for token_sent in [false, true] {
                    let step = hint(&api(400, code, token_sent), spec);
                    assert!(
                        !step.is_empty() && step != fallback,
                        "{name} (spec {spec:?}, token {token_sent}): {step:?}"
                    );
                }
            }
        }
    }

    /// Errors of this machine end with a step of their kind; one without a kind, with
    /// the fallback.
    #[test]
    fn errors_of_this_machine_have_hints_by_kind() {
        let spec = pai_translate::spec::JobSpec::parse(
            r#"{"jobName": "j", "image": "busybox", "taskRoles": [{"name": "a",
                "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "comand": "x"}]}"#,
            pai_translate::spec::SpecFormat::Json,
        )
        .expect_err("a bad spec");
        let spec = anyhow::Error::new(spec).context("reading the spec");
        assert!(hint(&spec, Some(true)).contains("correct each field named above"));
        let missing = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::NotFound))
            .context("reading spec nope.yaml");
        assert!(hint(&missing, None).contains("check the path named above"));
        let config = anyhow::Error::new(ConfigError::Invalid {
            field: "portRange",
            rule: "begin must be at least 1024".into(),
        });
        assert!(hint(&config, None).contains("correct the config field"));
        let refusal = anyhow::Error::new(Refusal {
            message: "which task?".into(),
            hint: "say -r".into(),
        });
        assert_eq!(hint(&refusal, None), "say -r");
        assert!(hint(&anyhow::anyhow!("odd"), None).contains("rest-lite help COMMAND"));
        let cut = anyhow::Error::new(ClientError::Cut("eof".into()));
        assert!(hint(&cut, None).contains("run the command again"));
    }
}
