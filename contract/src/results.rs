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

use crate::failure::Cause;

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

/// What a termination message carries about the result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Reported {
    /// The task's result.
    Result(Value),
    /// Why the task's result could not be sent.
    Invalid(String),
}

/// A termination message as the runtime writes it: the result (or why there is none)
/// and, for a failed command, its cause ([`crate::failure`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Message {
    /// The result, if the command wrote one.
    pub reported: Option<Reported>,
    /// Why the command failed, as its output said.
    pub cause: Option<Cause>,
}

impl Message {
    /// The message's text; `None` when there is nothing to say.
    pub fn to_text(&self) -> Option<String> {
        let mut object = serde_json::Map::new();
        match &self.reported {
            Some(Reported::Result(v)) => {
                object.insert("result".into(), v.clone());
            }
            Some(Reported::Invalid(why)) => {
                object.insert("invalid".into(), why.clone().into());
            }
            None => {}
        }
        if let Some(cause) = &self.cause {
            object.insert("cause".into(), serde_json::to_value(cause).ok()?);
        }
        (!object.is_empty()).then(|| Value::Object(object).to_string())
    }
}

/// The termination message for what the result file held (`read`: its contents, or why
/// it could not be read; no file, no result) and the failure's `cause`: `None` when there
/// is neither. It always fits the kubelet's 4096 bytes: a result too large is refused
/// whole, a cause is at most [`crate::failure::MAX_LINE`] bytes.
pub fn message(read: std::io::Result<Vec<u8>>, cause: Option<Cause>) -> Option<String> {
    let reported = match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(Reported::Invalid(format!(
            "cannot read the result file: {e}"
        ))),
        Ok(bytes) if bytes.len() > MAX_BYTES => Some(Reported::Invalid(format!(
            "the result is {} bytes; at most {MAX_BYTES} bytes of JSON are sent (a container's termination message holds 4096)",
            bytes.len()
        ))),
        Ok(bytes) => Some(match serde_json::from_slice::<Value>(&bytes) {
            Ok(value) => Reported::Result(value),
            Err(e) => Reported::Invalid(format!("the result is not JSON: {e}")),
        }),
    };
    let mut message = Message { reported, cause };
    let text = message.to_text()?;
    if text.len() <= KUBELET_MAX_BYTES {
        return Some(text);
    }
    // Written again by us and still too long: the result goes, refused whole; then the
    // cause, if even that does not fit.
    message.reported = Some(Reported::Invalid(format!(
        "the result does not fit in a termination message ({KUBELET_MAX_BYTES} bytes)"
    )));
    let text = message.to_text()?;
    if text.len() <= KUBELET_MAX_BYTES {
        return Some(text);
    }
    message.cause = None;
    message.to_text()
}

/// What a termination message reports, if it is the runtime's (a message the user's
/// program wrote itself is not read as one).
pub fn read_message(text: &str) -> Option<Message> {
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    if object.is_empty()
        || object
            .keys()
            .any(|k| !matches!(k.as_str(), "result" | "invalid" | "cause"))
    {
        return None;
    }
    let reported = match (object.get("result"), object.get("invalid")) {
        (Some(v), None) => Some(Reported::Result(v.clone())),
        (None, Some(Value::String(why))) => Some(Reported::Invalid(why.clone())),
        (None, None) => None,
        _ => return None,
    };
    let cause = match object.get("cause") {
        Some(c) => Some(serde_json::from_value(c.clone()).ok()?),
        None => None,
    };
    Some(Message { reported, cause })
}

/// The result a termination message reports, if it is the runtime's.
pub fn read(text: &str) -> Option<Reported> {
    read_message(text)?.reported
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(bytes: &[u8]) -> Option<Reported> {
        message(Ok(bytes.to_vec()), None).and_then(|m| {
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
        assert_eq!(
            message(Err(std::io::ErrorKind::NotFound.into()), None),
            None
        );
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
    fn a_cause_travels_with_or_without_a_result() {
        let cause = Cause {
            pattern: "python-exception".into(),
            line: "ValueError: no".into(),
        };
        let text = message(
            Err(std::io::ErrorKind::NotFound.into()),
            Some(cause.clone()),
        )
        .expect("message");
        let read = read_message(&text).expect("ours");
        assert_eq!((read.reported, read.cause), (None, Some(cause.clone())));
        let largest = format!("\"{}\"", "y".repeat(MAX_BYTES - 2));
        let cause = Cause {
            line: "x".repeat(400),
            ..cause
        };
        let text = message(Ok(largest.into_bytes()), Some(cause.clone())).expect("message");
        assert!(text.len() <= KUBELET_MAX_BYTES, "{}", text.len());
        let read = read_message(&text).expect("ours");
        assert!(matches!(read.reported, Some(Reported::Invalid(_))));
        assert_eq!(read.cause, Some(cause));
    }

    #[test]
    fn a_message_of_the_users_own_is_not_a_result() {
        assert_eq!(read("segfault in step 7"), None);
        assert_eq!(read(r#"{"result": 1, "other": 2}"#), None);
        assert_eq!(read(r#"{"score": 1}"#), None);
    }
}
