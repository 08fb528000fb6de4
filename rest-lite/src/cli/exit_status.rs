//! How a job's end becomes the exit status of the command that followed it (`run`,
//! `submit --follow`, `submit --wait`), one rule for all three, as `docker run` and
//! `podman run` keep theirs:
//!
//! | the job | exit status |
//! |---|---|
//! | `SUCCEEDED` | 0 |
//! | stopped here, by Ctrl-C | 130 (128 + SIGINT) |
//! | `STOPPED` by someone else | 143 (128 + SIGTERM, what its tasks were sent) |
//! | `FAILED` with its exit code 1–255 (the user's command's; the runtime's 200, 201, 210) | that code |
//! | `FAILED` by the platform (a negative code: -200 an image not had, -220 …), with no code, or `UNKNOWN` | 125, as `docker run` says of its own failures |
//!
//! A command that cannot follow the job at all (a bad spec, no server) exits 2 before
//! any of these.

use std::process::ExitCode;

use pai_api::status::JobState;

/// What stands for the platform's failures, which have no exit code of their own.
pub const PLATFORM_FAILED: u8 = 125;
/// A job stopped here (Ctrl-C).
pub const STOPPED_HERE: u8 = 130;
/// A job stopped by someone else.
pub const STOPPED: u8 = 143;

/// The exit status for a job that ended in `state` with `code` (its `appExitCode`);
/// `interrupted`: stopped here.
pub fn of(state: JobState, code: Option<i32>, interrupted: bool) -> ExitCode {
    ExitCode::from(number(state, code, interrupted))
}

fn number(state: JobState, code: Option<i32>, interrupted: bool) -> u8 {
    match state {
        JobState::Succeeded => 0,
        _ if interrupted => STOPPED_HERE,
        JobState::Stopped => STOPPED,
        JobState::Failed => code
            .and_then(|c| u8::try_from(c).ok())
            .filter(|&c| c != 0)
            .unwrap_or(PLATFORM_FAILED),
        JobState::Waiting | JobState::Running | JobState::Unknown => PLATFORM_FAILED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_end_has_its_status_as_the_table_says() {
        assert_eq!(number(JobState::Succeeded, Some(0), false), 0);
        assert_eq!(number(JobState::Succeeded, Some(0), true), 0);
        assert_eq!(number(JobState::Failed, Some(3), false), 3);
        assert_eq!(number(JobState::Failed, Some(201), false), 201);
        assert_eq!(number(JobState::Failed, Some(-200), false), 125);
        assert_eq!(number(JobState::Failed, Some(256), false), 125);
        assert_eq!(number(JobState::Failed, Some(0), false), 125);
        assert_eq!(number(JobState::Failed, None, false), 125);
        assert_eq!(number(JobState::Failed, Some(3), true), 130);
        assert_eq!(number(JobState::Stopped, Some(-210), true), 130);
        assert_eq!(number(JobState::Stopped, Some(-210), false), 143);
        assert_eq!(number(JobState::Unknown, None, false), 125);
    }
}
