//! A finished job's Framework kept deflated while nothing reads it, beside the row the
//! lists show of it ([`crate::job::Job::freeze`]).

use std::sync::Arc;

use pai_contract::Framework;

/// A finished job's Framework kept deflated, and its list row (see [`crate::job::Job::freeze`]).
pub(crate) struct Cold {
    deflated: Box<[u8]>,
    pub(crate) row: Arc<pai_api::jobs::JobRow>,
    /// Its creation time as it was: JSON keeps whole seconds of it, lists order by
    /// milliseconds.
    created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl Cold {
    /// `framework` deflated; `None` where it cannot be (it is kept whole then).
    pub(crate) fn of(framework: &Framework) -> Option<Self> {
        Self::of_json(&serde_json::to_vec(framework).ok()?, framework)
    }

    /// `framework`, whose JSON is `json` (as saved), deflated.
    pub(crate) fn of_json(json: &[u8], framework: &Framework) -> Option<Self> {
        let mut deflated = flate2::write::DeflateEncoder::new(
            Vec::with_capacity(json.len() / 3),
            flate2::Compression::fast(),
        );
        std::io::Write::write_all(&mut deflated, json).ok()?;
        let bytes = deflated.finish().ok()?;
        Some(Self {
            deflated: bytes.into_boxed_slice(),
            row: Arc::new(pai_api::jobs::JobRow::unheld(framework)),
            created: framework.metadata.creation_timestamp.clone(),
        })
    }

    /// When it ended (ms since the epoch).
    pub(crate) fn ended_ms(&self) -> i64 {
        self.row.summary.status.completed_time.unwrap_or(0)
    }

    pub(crate) fn framework(&self) -> Result<Framework, serde_json::Error> {
        let mut framework = inflate(&self.deflated)?;
        framework.metadata.creation_timestamp = self.created.clone();
        Ok(framework)
    }
}

/// A cold job's Framework from its deflated JSON.
fn inflate(bytes: &[u8]) -> Result<Framework, serde_json::Error> {
    let mut json = Vec::with_capacity(bytes.len() * 4);
    std::io::Read::read_to_end(&mut flate2::read::DeflateDecoder::new(bytes), &mut json)
        .map_err(serde_json::Error::io)?;
    serde_json::from_slice(&json)
}
