//! FrameworkController's completion codes: what a container's exit code means to the
//! controller, and the codes the controller itself uses. Everything else refers to these
//! names, never to bare integers.

/// An exit code of ours that FrameworkController reads as a completion code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExitCode {
    /// 0: the task did what it was asked.
    Succeeded,
    /// 200: a transient failure; the attempt is retried and the retry counts.
    TransientFailure,
    /// 201: a transient conflict (barrier timed out, port taken); retried with back-off,
    /// not counted against `retryCount`.
    TransientConflict,
    /// 210: a permanent failure; never retried.
    PermanentFailure,
    /// 1: anything else, as an unexpected error of ours.
    Unknown,
}

/// How FrameworkController treats a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompletionKind {
    Succeeded,
    TransientFailure,
    TransientConflict,
    PermanentFailure,
    UnknownFailure,
}

impl ExitCode {
    pub const fn code(self) -> i32 {
        match self {
            ExitCode::Succeeded => 0,
            ExitCode::TransientFailure => 200,
            ExitCode::TransientConflict => 201,
            ExitCode::PermanentFailure => 210,
            ExitCode::Unknown => 1,
        }
    }

    pub const fn phrase(self) -> &'static str {
        match self {
            ExitCode::Succeeded => "Succeeded",
            ExitCode::TransientFailure => "ContainerTransientFailed",
            ExitCode::TransientConflict => "ContainerTransientConflictFailed",
            ExitCode::PermanentFailure => "ContainerPermanentFailed",
            ExitCode::Unknown => "ContainerUnknownFailed",
        }
    }
}

/// Codes FrameworkController itself puts in a completion status.
pub mod platform {
    /// The task's pod was deleted by someone else (in the embedded default: its
    /// processes ended with the server).
    pub const POD_EXTERNAL_DELETED: i32 = -101;
    /// The Framework was asked to stop (`executionType: Stop`).
    pub const STOP_REQUESTED: i32 = -210;
    /// The attempt completed by its completion policy while the task still ran.
    pub const ATTEMPT_COMPLETION: i32 = -220;
    /// The task's pod was deleted.
    pub const TASK_DELETED: i32 = -230;
}

impl CompletionKind {
    /// The controller's `type` of a completion: `Succeeded` or `Failed`, with attributes.
    pub fn type_name(self) -> &'static str {
        match self {
            CompletionKind::Succeeded => "Succeeded",
            _ => "Failed",
        }
    }

    pub fn attributes(self) -> &'static [&'static str] {
        match self {
            CompletionKind::Succeeded => &[],
            CompletionKind::TransientFailure => &["Transient"],
            CompletionKind::TransientConflict => &["Transient", "Conflict"],
            CompletionKind::PermanentFailure => &["Permanent"],
            CompletionKind::UnknownFailure => &[],
        }
    }
}

/// The phrase the controller gives a code.
pub fn phrase(code: i32) -> &'static str {
    match code {
        0 => ExitCode::Succeeded.phrase(),
        200 => ExitCode::TransientFailure.phrase(),
        201 => ExitCode::TransientConflict.phrase(),
        210 => ExitCode::PermanentFailure.phrase(),
        platform::POD_EXTERNAL_DELETED => "PodExternalDeleted",
        platform::STOP_REQUESTED => "StopFrameworkRequested",
        platform::ATTEMPT_COMPLETION => "FrameworkAttemptCompletion",
        platform::TASK_DELETED => "DeleteTaskRequested",
        130 => "ContainerSigIntReceived",
        137 => "ContainerSigKillReceived",
        143 => "ContainerSigTermReceived",
        _ => "ContainerFailed",
    }
}

/// How the controller classifies a completion code: container exit codes (≥ 0) and the
/// controller's own (< 0: −1xx transient, −2xx permanent, −3xx unknown).
pub fn classify(code: i32) -> CompletionKind {
    match code {
        0 => CompletionKind::Succeeded,
        200 => CompletionKind::TransientFailure,
        201 => CompletionKind::TransientConflict,
        210 => CompletionKind::PermanentFailure,
        -199..=-100 => CompletionKind::TransientFailure,
        -299..=-200 => CompletionKind::PermanentFailure,
        _ => CompletionKind::UnknownFailure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_classify_as_the_controller_does() {
        for code in [
            ExitCode::Succeeded,
            ExitCode::TransientFailure,
            ExitCode::TransientConflict,
            ExitCode::PermanentFailure,
        ] {
            let expected = match code {
                ExitCode::Succeeded => CompletionKind::Succeeded,
                ExitCode::TransientFailure => CompletionKind::TransientFailure,
                ExitCode::TransientConflict => CompletionKind::TransientConflict,
                ExitCode::PermanentFailure => CompletionKind::PermanentFailure,
                ExitCode::Unknown => CompletionKind::UnknownFailure,
            };
            assert_eq!(classify(code.code()), expected);
        }
        assert_eq!(
            classify(platform::STOP_REQUESTED),
            CompletionKind::PermanentFailure
        );
        assert_eq!(classify(-100), CompletionKind::TransientFailure);
        assert_eq!(classify(137), CompletionKind::UnknownFailure);
    }
}
