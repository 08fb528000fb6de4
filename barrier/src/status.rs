//! Reading the task statuses of a Framework, plain or compressed.

use std::io::Read;

use base64::Engine;
use flate2::read::GzDecoder;

use pai_contract::framework::{Framework, TaskRoleStatus};

/// Largest decompressed status accepted: far above what the controller writes for the
/// largest jobs, small enough that a corrupt object cannot exhaust memory.
const MAX_DECOMPRESSED: u64 = 256 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("taskRoleStatusesCompressed is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("taskRoleStatusesCompressed is not gzip: {0}")]
    Gzip(std::io::Error),
    #[error("taskRoleStatusesCompressed decompresses to more than {MAX_DECOMPRESSED} bytes")]
    TooLarge,
    #[error("taskRoleStatusesCompressed is not a JSON list of task role statuses: {0}")]
    Json(#[from] serde_json::Error),
}

/// The task role statuses of the current attempt; empty before the controller wrote any.
pub fn task_role_statuses(framework: &Framework) -> Result<Vec<TaskRoleStatus>, StatusError> {
    let Some(status) = &framework.status else {
        return Ok(Vec::new());
    };
    let attempt = &status.attempt_status;
    if let Some(plain) = &attempt.task_role_statuses {
        return Ok(plain.clone());
    }
    match &attempt.task_role_statuses_compressed {
        Some(compressed) => decompress(compressed),
        None => Ok(Vec::new()),
    }
}

/// base64 → gzip → JSON, as the controller writes `taskRoleStatusesCompressed`.
pub fn decompress(compressed: &str) -> Result<Vec<TaskRoleStatus>, StatusError> {
    let gz = base64::engine::general_purpose::STANDARD.decode(compressed.trim())?;
    let mut json = Vec::new();
    GzDecoder::new(gz.as_slice())
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut json)
        .map_err(StatusError::Gzip)?;
    if json.len() as u64 > MAX_DECOMPRESSED {
        return Err(StatusError::TooLarge);
    }
    Ok(serde_json::from_slice(&json)?)
}

/// The inverse of [`decompress`], as the controller does it (tests and the embedded default).
pub fn compress(statuses: &[TaskRoleStatus]) -> String {
    use std::io::Write;
    let json = serde_json::to_vec(statuses).unwrap_or_default();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(&json);
    let bytes = gz.finish().unwrap_or_default();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_contract::framework::TaskStatus;

    #[test]
    fn compressed_statuses_round_trip() {
        let statuses = vec![TaskRoleStatus {
            name: "worker".into(),
            instance_uid: None,
            task_statuses: (0..3)
                .map(|i| TaskStatus {
                    index: i,
                    ..TaskStatus::default()
                })
                .collect(),
        }];
        assert_eq!(decompress(&compress(&statuses)).expect("decodes"), statuses);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(decompress("!!!"), Err(StatusError::Base64(_))));
        assert!(matches!(decompress("aGVsbG8="), Err(StatusError::Gzip(_))));
    }
}
