//! What to do next, after an error: one line under it, for the errors people meet first.

use pai_client::ClientError;

/// The next step for `error`, when there is an obvious one.
pub fn next_step(error: &anyhow::Error) -> Option<String> {
    let client = error
        .chain()
        .find_map(|e| e.downcast_ref::<ClientError>())?;
    Some(match client {
        ClientError::Transport { .. } => "is a server running there? Start one with `rest-lite serve` (it runs jobs on this machine without a cluster), or give another one's address with --server or REST_LITE_SERVER".to_string(),
        ClientError::Api { status: 401, message, .. } if message.contains("token given") => "the token given (--token or REST_LITE_TOKEN) is not this server's: check it, or ask its operator for one (`rest-lite token`)".to_string(),
        ClientError::Api { status: 401, .. } => "this server wants a token: give yours with --token or REST_LITE_TOKEN (its operator makes one with `rest-lite token`)".to_string(),
        ClientError::Api { code, .. } if code == "NoJobError" => "`rest-lite jobs` lists your jobs; --user names another user's".to_string(),
        ClientError::Api { code, .. } if code == "NoTaskError" => "`rest-lite status JOB` lists its tasks, each as ROLE-INDEX (give them with -r ROLE -i INDEX)".to_string(),
        ClientError::Api { status: 409, code, .. } if code == "ConflictJobError" => "a job keeps its name until it is deleted: change jobName, or `rest-lite delete NAME` first".to_string(),
        // A spec the transformer refuses; the server's own limits (the task limit of this
        // machine, …) name their setting in the message itself.
        ClientError::Api { status: 400, code, message } if code == "InvalidParametersError" && message.starts_with("the job spec") => "`rest-lite transform SPEC` checks a spec without a server".to_string(),
        ClientError::Api { status: 503, .. } => "the server cannot reach its cluster; `rest-lite run SPEC` runs the job on this machine instead".to_string(),
        _ => return None,
    })
}
