//! FrameworkController's completion codes, as one table like the controller's own
//! (`pkg/apis/frameworkcontroller/v1/completion.go`): each row a code, its phrase and its
//! kind. Everything else refers to the rows by name, never to bare integers.
//!
//! A container exit code that is no row of the table (1, 137, …) is
//! `ContainerUnrecognizedFailed`: failed, with no attribute, so retried by count.

/// How FrameworkController treats a completion: its `type` (`Succeeded` or `Failed`) and
/// the attributes that steer the fancy retry policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompletionKind {
    /// `Succeeded`.
    Succeeded,
    /// `Failed` + `Transient`: retried at once, not counted.
    TransientFailure,
    /// `Failed` + `Transient` + `Conflict`: retried after a delay, not counted.
    TransientConflict,
    /// `Failed` + `Permanent`: never retried.
    PermanentFailure,
    /// `Failed` with no attribute: retried while `retryCount` allows.
    UnknownFailure,
}

impl CompletionKind {
    /// The controller's `type.name`: `Succeeded` or `Failed`.
    pub fn type_name(self) -> &'static str {
        match self {
            CompletionKind::Succeeded => "Succeeded",
            _ => "Failed",
        }
    }

    /// The controller's `type.attributes`.
    pub fn attributes(self) -> &'static [&'static str] {
        match self {
            CompletionKind::Succeeded | CompletionKind::UnknownFailure => &[],
            CompletionKind::TransientFailure => &["Transient"],
            CompletionKind::TransientConflict => &["Transient", "Conflict"],
            CompletionKind::PermanentFailure => &["Permanent"],
        }
    }
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletionCode {
    /// The code: a container's exit code (≥ 0) or the controller's own (< 0).
    pub code: i32,
    /// The controller's name for it.
    pub phrase: &'static str,
    /// How it is treated.
    pub kind: CompletionKind,
}

impl CompletionCode {
    /// Whether FrameworkController never retries an attempt that completed with this code,
    /// whatever the retry policy (its built-in, always-on policy).
    pub fn never_retried(self) -> bool {
        matches!(
            self.code,
            codes::STOP_FRAMEWORK_REQUESTED
                | codes::FRAMEWORK_ATTEMPT_COMPLETION
                | codes::DELETE_TASK_REQUESTED
        )
    }
}

/// The codes by name.
pub mod codes {
    /// The task did what it was asked.
    pub const SUCCEEDED: i32 = 0;
    /// A transient failure of the container: retried at once, not counted.
    pub const CONTAINER_TRANSIENT_FAILED: i32 = 200;
    /// A transient conflict (barrier timed out, port taken): retried after a delay.
    pub const CONTAINER_TRANSIENT_CONFLICT_FAILED: i32 = 201;
    /// A permanent failure of the container: never retried.
    pub const CONTAINER_PERMANENT_FAILED: i32 = 210;
    /// The attempt's ConfigMap was deleted by someone else.
    pub const CONFIG_MAP_EXTERNAL_DELETED: i32 = -100;
    /// The task's pod was deleted by someone else (in the embedded default: its processes
    /// ended with the server).
    pub const POD_EXTERNAL_DELETED: i32 = -101;
    /// The controller's cache never saw the ConfigMap it created.
    pub const CONFIG_MAP_LOCAL_CACHE_CREATION_TIMEOUT: i32 = -110;
    /// The controller's cache never saw the pod it created.
    pub const POD_LOCAL_CACHE_CREATION_TIMEOUT: i32 = -111;
    /// Creating the pod failed, transiently.
    pub const POD_CREATION_TRANSIENT_ERROR: i32 = -120;
    /// Creating the pod failed for good (an invalid pod).
    pub const POD_CREATION_PERMANENT_ERROR: i32 = -200;
    /// The Framework was asked to stop (`executionType: Stop`).
    pub const STOP_FRAMEWORK_REQUESTED: i32 = -210;
    /// The attempt completed by its completion policy while the task still ran.
    pub const FRAMEWORK_ATTEMPT_COMPLETION: i32 = -220;
    /// The task was deleted.
    pub const DELETE_TASK_REQUESTED: i32 = -230;
    /// The pod failed with no failed container.
    pub const POD_FAILED_WITHOUT_FAILED_CONTAINER: i32 = -300;
    /// Creating the pod failed for an unknown reason.
    pub const POD_CREATION_UNKNOWN_ERROR: i32 = -310;
}

const fn row(code: i32, phrase: &'static str, kind: CompletionKind) -> CompletionCode {
    CompletionCode { code, phrase, kind }
}

/// Every code FrameworkController defines, in its order.
pub const TABLE: &[CompletionCode] = {
    use CompletionKind::*;
    use codes::*;
    &[
        row(
            CONTAINER_TRANSIENT_FAILED,
            "ContainerTransientFailed",
            TransientFailure,
        ),
        row(
            CONTAINER_TRANSIENT_CONFLICT_FAILED,
            "ContainerTransientConflictFailed",
            TransientConflict,
        ),
        row(
            CONTAINER_PERMANENT_FAILED,
            "ContainerPermanentFailed",
            PermanentFailure,
        ),
        row(SUCCEEDED, "Succeeded", Succeeded),
        row(
            CONFIG_MAP_EXTERNAL_DELETED,
            "ConfigMapExternalDeleted",
            TransientFailure,
        ),
        row(POD_EXTERNAL_DELETED, "PodExternalDeleted", TransientFailure),
        row(
            CONFIG_MAP_LOCAL_CACHE_CREATION_TIMEOUT,
            "ConfigMapLocalCacheCreationTimeout",
            TransientFailure,
        ),
        row(
            POD_LOCAL_CACHE_CREATION_TIMEOUT,
            "PodLocalCacheCreationTimeout",
            TransientFailure,
        ),
        row(
            POD_CREATION_TRANSIENT_ERROR,
            "PodCreationTransientError",
            TransientFailure,
        ),
        row(
            POD_CREATION_PERMANENT_ERROR,
            "PodCreationPermanentError",
            PermanentFailure,
        ),
        row(
            STOP_FRAMEWORK_REQUESTED,
            "StopFrameworkRequested",
            PermanentFailure,
        ),
        row(
            FRAMEWORK_ATTEMPT_COMPLETION,
            "FrameworkAttemptCompletion",
            PermanentFailure,
        ),
        row(
            DELETE_TASK_REQUESTED,
            "DeleteTaskRequested",
            PermanentFailure,
        ),
        row(
            POD_FAILED_WITHOUT_FAILED_CONTAINER,
            "PodFailedWithoutFailedContainer",
            UnknownFailure,
        ),
        row(
            POD_CREATION_UNKNOWN_ERROR,
            "PodCreationUnknownError",
            UnknownFailure,
        ),
    ]
};

/// The row of `code`; a code that is no row is a container's unrecognised failure.
pub fn completion(code: i32) -> CompletionCode {
    TABLE
        .iter()
        .find(|row| row.code == code)
        .copied()
        .unwrap_or(row(
            code,
            "ContainerUnrecognizedFailed",
            CompletionKind::UnknownFailure,
        ))
}

/// What a task's completion code means, in a few words a user reads: who ended the task
/// and why. Codes of no row are the user command's own exit code.
pub fn meaning(code: i32) -> String {
    match platform_meaning(code) {
        Some(meaning) => meaning.into(),
        None if code > 128 && code < 160 => {
            format!("the user command was killed by signal {}", code - 128)
        }
        None => format!("the user command exited with code {code}"),
    }
}

/// Whether [`meaning`] of `code` says the number itself ("exited with code 3"); a
/// platform's code or a signal's it does not.
pub fn meaning_says_code(code: i32) -> bool {
    platform_meaning(code).is_none() && !(code > 128 && code < 160)
}

/// What `code` means where the platform (the runtime, FrameworkController, the embedded
/// default) gave it, or 0; `None`: it is the user command's own exit code.
pub fn platform_meaning(code: i32) -> Option<&'static str> {
    use codes::*;
    Some(match code {
        SUCCEEDED => "succeeded",
        CONTAINER_TRANSIENT_FAILED => "failed, and may pass if retried (the runtime said so)",
        CONTAINER_TRANSIENT_CONFLICT_FAILED => {
            "a conflict: a port taken, or the barrier timed out; retried later"
        }
        CONTAINER_PERMANENT_FAILED => "failed for good (the runtime said so); not retried",
        CONFIG_MAP_EXTERNAL_DELETED | POD_EXTERNAL_DELETED => {
            "ended from outside: its pod deleted, or the server restarted while it ran"
        }
        CONFIG_MAP_LOCAL_CACHE_CREATION_TIMEOUT | POD_LOCAL_CACHE_CREATION_TIMEOUT => {
            "its pod was not seen in time by the controller"
        }
        POD_CREATION_TRANSIENT_ERROR => "its pod could not be created, for now",
        POD_CREATION_PERMANENT_ERROR => "its pod cannot be created",
        STOP_FRAMEWORK_REQUESTED => "stopped: the job was stopped",
        FRAMEWORK_ATTEMPT_COMPLETION => {
            "stopped by the platform: the job's attempt ended (another task decided it)"
        }
        DELETE_TASK_REQUESTED => "stopped: the task was deleted",
        POD_FAILED_WITHOUT_FAILED_CONTAINER => "its pod failed, no container did",
        POD_CREATION_UNKNOWN_ERROR => "its pod could not be created (unknown error)",
        _ => return None,
    })
}

/// What a task's completion code means where the job's attempt ended as `attempt_code`
/// says: a task the platform stopped because the user stopped the job (FrameworkController
/// gives it −220, the attempt −210) reads as the user's stop, not as another task's
/// decision.
pub fn task_meaning(code: i32, attempt_code: Option<i32>, stop_requested: bool) -> String {
    if code == codes::FRAMEWORK_ATTEMPT_COMPLETION && stopped_by_user(stop_requested, attempt_code)
    {
        return "stopped by the platform: the job was stopped".into();
    }
    meaning(code)
}

/// Whether a job's attempt ended by the user's stop: a stop was asked (`executionType:
/// Stop`), or the attempt's code says so (−210).
pub fn stopped_by_user(stop_requested: bool, attempt_code: Option<i32>) -> bool {
    stop_requested || attempt_code == Some(codes::STOP_FRAMEWORK_REQUESTED)
}

/// The exit codes our own programs end with when they fail on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExitCode {
    /// 200: a transient failure; the attempt is retried.
    TransientFailure,
    /// 201: a transient conflict (barrier timed out, port taken); retried with back-off.
    TransientConflict,
    /// 210: a permanent failure; never retried.
    PermanentFailure,
    /// 1: an unexpected error, retried by count (frameworkbarrier's "other errors").
    Unknown,
}

impl ExitCode {
    /// The process exit code.
    pub const fn code(self) -> i32 {
        match self {
            ExitCode::TransientFailure => codes::CONTAINER_TRANSIENT_FAILED,
            ExitCode::TransientConflict => codes::CONTAINER_TRANSIENT_CONFLICT_FAILED,
            ExitCode::PermanentFailure => codes::CONTAINER_PERMANENT_FAILED,
            ExitCode::Unknown => 1,
        }
    }

    /// The code's row.
    pub fn completion(self) -> CompletionCode {
        completion(self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_words_a_user_reads() {
        assert_eq!(
            meaning(codes::FRAMEWORK_ATTEMPT_COMPLETION),
            "stopped by the platform: the job's attempt ended (another task decided it)"
        );
        assert_eq!(meaning(3), "the user command exited with code 3");
        assert_eq!(meaning(137), "the user command was killed by signal 9");
        assert_eq!(platform_meaning(3), None);
        for code in [-220, 0, 3, 137, 255] {
            assert_eq!(
                meaning_says_code(code),
                meaning(code).contains(&format!("code {code}")),
                "{code}"
            );
        }
        assert_eq!(platform_meaning(137), None);
        assert!(platform_meaning(codes::CONTAINER_TRANSIENT_CONFLICT_FAILED).is_some());
        for row in TABLE {
            assert!(
                !meaning(row.code).contains("exited with code"),
                "{}",
                row.code
            );
        }
    }

    /// FrameworkController's published list (completion.go at d6e7078): code, phrase,
    /// type name, attributes.
    const PUBLISHED: &[(i32, &str, &str, &[&str])] = &[
        (200, "ContainerTransientFailed", "Failed", &["Transient"]),
        (
            201,
            "ContainerTransientConflictFailed",
            "Failed",
            &["Transient", "Conflict"],
        ),
        (210, "ContainerPermanentFailed", "Failed", &["Permanent"]),
        (0, "Succeeded", "Succeeded", &[]),
        (-100, "ConfigMapExternalDeleted", "Failed", &["Transient"]),
        (-101, "PodExternalDeleted", "Failed", &["Transient"]),
        (
            -110,
            "ConfigMapLocalCacheCreationTimeout",
            "Failed",
            &["Transient"],
        ),
        (
            -111,
            "PodLocalCacheCreationTimeout",
            "Failed",
            &["Transient"],
        ),
        (-120, "PodCreationTransientError", "Failed", &["Transient"]),
        (-200, "PodCreationPermanentError", "Failed", &["Permanent"]),
        (-210, "StopFrameworkRequested", "Failed", &["Permanent"]),
        (-220, "FrameworkAttemptCompletion", "Failed", &["Permanent"]),
        (-230, "DeleteTaskRequested", "Failed", &["Permanent"]),
        (-300, "PodFailedWithoutFailedContainer", "Failed", &[]),
        (-310, "PodCreationUnknownError", "Failed", &[]),
    ];

    #[test]
    fn the_table_is_frameworkcontrollers() {
        let ours: Vec<(i32, &str, &str, &[&str])> = TABLE
            .iter()
            .map(|r| (r.code, r.phrase, r.kind.type_name(), r.kind.attributes()))
            .collect();
        assert_eq!(ours, PUBLISHED);
    }

    #[test]
    fn other_container_codes_are_unrecognised_failures() {
        for code in [1, 3, 137, 143, 255] {
            let row = completion(code);
            assert_eq!(row.phrase, "ContainerUnrecognizedFailed");
            assert_eq!(row.kind, CompletionKind::UnknownFailure);
        }
    }

    #[test]
    fn only_the_built_in_codes_are_never_retried() {
        let never: Vec<i32> = TABLE
            .iter()
            .filter(|r| r.never_retried())
            .map(|r| r.code)
            .collect();
        assert_eq!(never, [-210, -220, -230]);
    }

    #[test]
    fn our_exit_codes_are_rows() {
        assert_eq!(
            ExitCode::TransientFailure.completion().kind,
            CompletionKind::TransientFailure
        );
        assert_eq!(
            ExitCode::TransientConflict.completion().kind,
            CompletionKind::TransientConflict
        );
        assert_eq!(
            ExitCode::PermanentFailure.completion().kind,
            CompletionKind::PermanentFailure
        );
        assert_eq!(
            ExitCode::Unknown.completion().kind,
            CompletionKind::UnknownFailure
        );
    }
}
