//! What to do next, after an error: one line under it, for the errors people meet first.

use pai_client::{ClientError, ErrorCode};

/// The next step for `error`, when there is an obvious one; `spec`: the command sent a
/// job spec (a 400 is then about it), and whether that spec fails `rest-lite transform`
/// here too (where it does not, a 400 is about what it asks of the server's place, and
/// the message names that); `job` its name where known; `server_here`: the server is on
/// this machine (a loopback address).
pub fn next_step(
    error: &anyhow::Error,
    spec: Option<bool>,
    job: Option<&str>,
    server_here: bool,
) -> Option<String> {
    let client = error
        .chain()
        .find_map(|e| e.downcast_ref::<ClientError>())?;
    let ClientError::Api {
        code, token_sent, ..
    } = client
    else {
        return matches!(client, ClientError::Transport { .. }).then(|| "is a server running there? Start one with `rest-lite serve` (it runs jobs on this machine without a cluster), or give another one's address with --server or REST_LITE_SERVER".to_string());
    };
    Some(match code {
        ErrorCode::UnauthorizedUserError if *token_sent => "the token given (--token or REST_LITE_TOKEN) is not this server's: check it, or ask its operator for one (`rest-lite token`)".to_string(),
        // A server of this machine keeps its token in its state directory, sent only when
        // that directory records it serving at this address.
        ErrorCode::UnauthorizedUserError if server_here => "a server of this machine that made its own token keeps it in its state directory: name the directory it was started with (its --state-dir) with --state-dir or REST_LITE_STATE_DIR, and its token is sent; a server with a token file wants yours with --token or REST_LITE_TOKEN (the message above says which this one is)".to_string(),
        ErrorCode::UnauthorizedUserError => "this server wants a token: give yours with --token or REST_LITE_TOKEN (its operator makes one with `rest-lite token`)".to_string(),
        ErrorCode::NoJobError => "`rest-lite jobs` lists your jobs; --user names another user's".to_string(),
        ErrorCode::NoJobSshInfoError => format!(
            "`rest-lite logs {} -r ROLE --runtime` shows a task's runtime lines, which say why it has no ssh; an image needs openssh-server",
            job.map_or_else(|| "JOB".to_string(), super::human::shell_word)
        ),
        ErrorCode::NoTaskError => "`rest-lite status JOB` lists its tasks, each as ROLE-INDEX (give them with -r ROLE -i INDEX)".to_string(),
        ErrorCode::ConflictJobError if spec.is_some() => format!(
            "a job keeps its name until it is deleted: change jobName, or `rest-lite delete {}` first",
            job.map_or_else(|| "NAME".to_string(), super::human::shell_word)
        ),
        // A spec refused; the server's own limits (the task limit of this machine, …)
        // name their setting in the message itself.
        ErrorCode::InvalidParametersError if spec == Some(true) => "`rest-lite transform SPEC` checks a spec without a server".to_string(),
        ErrorCode::ServiceUnavailableError => "the server cannot reach its cluster; `rest-lite run SPEC` runs the job on this machine instead".to_string(),
        _ => return None,
    })
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

    #[test]
    fn hints_follow_the_code_and_what_was_sent_never_the_words() {
        let hint = |e: &anyhow::Error, spec| next_step(e, spec, None, false).unwrap_or_default();
        let refused = api(400, ErrorCode::InvalidParametersError, true);
        assert!(hint(&refused, Some(true)).contains("rest-lite transform SPEC"));
        assert_eq!(
            next_step(&refused, None, None, false),
            None,
            "a 400 of a read is no spec's"
        );
        assert_eq!(
            next_step(&refused, Some(false), None, false),
            None,
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
        assert_eq!(
            next_step(
                &api(500, ErrorCode::UnknownError, true),
                Some(true),
                None,
                false
            ),
            None
        );
    }
}
