//! A task's result: a small JSON value the user command writes to the file named by
//! `PAI_RESULT_FILE`. It travels as Kubernetes' own channel for a container's last
//! words, the termination message: the runtime reads the file when the user command has
//! ended and writes the message; FrameworkController copies each container's message
//! into the task's completion status (`completionStatus.pod.containers[].message`); the
//! embedded default does the same from the file the runtime wrote. The job's status
//! then shows each task's result, read from the Framework alone.
//!
//! The message is an envelope, `{"result": <the value>}` or `{"invalid": "<why>"}`, so
//! that a result that cannot be sent is reported as such instead of lost or cut: the
//! kubelet keeps at most 4096 bytes of a container's message (and 12 KiB for all of a
//! pod's containers; this pod's other container writes none), so a result of more than
//! [`MAX_BYTES`] is refused whole. A result never changes the task's exit code.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The largest result, in bytes of JSON as written: with the envelope it fits in the
/// kubelet's 4096 bytes per container.
pub const MAX_BYTES: usize = 4000;

/// The most the kubelet keeps of one container's termination message.
pub const KUBELET_MAX_BYTES: usize = 4096;

/// The kubelet's termination message file (`terminationMessagePath`'s default).
pub const KUBELET_TERMINATION_LOG: &str = "/dev/termination-log";

/// The file name of the result in the runtime's root.
pub const RESULT_FILE_NAME: &str = "result.json";

/// The file name of the termination message in the runtime's root (the embedded
/// default's; a pod's is the kubelet's).
pub const TERMINATION_LOG_NAME: &str = "termination-log";

/// What a termination message carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Reported {
    /// The task's result.
    Result(Value),
    /// Why the task's result could not be sent.
    Invalid(String),
}

/// The termination message for what the result file held: `None` when there is no file
/// (no result), else the envelope. `read` is the file's contents or why it could not be
/// read.
pub fn message(read: std::io::Result<Vec<u8>>) -> Option<String> {
    let reported = match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => Reported::Invalid(format!("cannot read the result file: {e}")),
        Ok(bytes) if bytes.len() > MAX_BYTES => Reported::Invalid(format!(
            "the result is {} bytes; at most {MAX_BYTES} bytes of JSON are sent (a container's termination message holds 4096)",
            bytes.len()
        )),
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            // Written again by us: within the kubelet's limit, or refused.
            Ok(value) => match serde_json::to_string(&Reported::Result(value)) {
                Ok(m) if m.len() <= KUBELET_MAX_BYTES => return Some(m),
                _ => Reported::Invalid(format!(
                    "the result does not fit in a termination message ({KUBELET_MAX_BYTES} bytes)"
                )),
            },
            Err(e) => Reported::Invalid(format!("the result is not JSON: {e}")),
        },
    };
    serde_json::to_string(&reported).ok()
}

/// What a termination message reports, if it is a result's envelope (a message the
/// user's program wrote itself is not read as one).
pub fn read(message: &str) -> Option<Reported> {
    serde_json::from_str(message).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(bytes: &[u8]) -> Option<Reported> {
        message(Ok(bytes.to_vec())).and_then(|m| {
            assert!(m.len() <= 4096, "{} bytes", m.len());
            read(&m)
        })
    }

    #[test]
    fn a_result_travels_whole() {
        assert_eq!(
            round_trip(br#"{"accuracy": 0.93, "checkpoint": "/out/ckpt-7"}"#),
            Some(Reported::Result(
                serde_json::json!({"accuracy": 0.93, "checkpoint": "/out/ckpt-7"})
            ))
        );
        assert_eq!(round_trip(b"42\n"), Some(Reported::Result(42.into())));
    }

    #[test]
    fn no_file_no_result() {
        assert_eq!(message(Err(std::io::ErrorKind::NotFound.into())), None);
    }

    #[test]
    fn bad_results_are_reported_never_cut() {
        match round_trip(b"{not json") {
            Some(Reported::Invalid(why)) => assert!(why.contains("not JSON"), "{why}"),
            other => panic!("{other:?}"),
        }
        let big = format!("\"{}\"", "x".repeat(MAX_BYTES));
        match round_trip(big.as_bytes()) {
            Some(Reported::Invalid(why)) => {
                assert!(why.contains("4002 bytes") && why.contains("4000"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        // The largest result fits the kubelet's 4096 bytes with its envelope.
        let largest = format!("\"{}\"", "y".repeat(MAX_BYTES - 2));
        assert!(matches!(
            round_trip(largest.as_bytes()),
            Some(Reported::Result(_))
        ));
    }

    #[test]
    fn a_message_of_the_users_own_is_not_a_result() {
        assert_eq!(read("segfault in step 7"), None);
        assert_eq!(read(r#"{"result": 1, "other": 2}"#), None);
        assert_eq!(read(r#"{"score": 1}"#), None);
    }
}
