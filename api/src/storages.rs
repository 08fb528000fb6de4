//! OpenPAI's storages as its v2 API shows them (`GET /api/v2/storages`, `…/{name}`), as
//! the SDK's `StorageClient` reads them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One storage in the list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageSummary {
    pub name: String,
    /// `false`: each user has a directory of their own in it.
    pub share: bool,
    /// The volume it mounts: its PersistentVolumeClaim.
    pub volume_name: String,
    /// Mounted for a job whose storage list is empty.
    pub default: bool,
}

/// `GET /api/v2/storages`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StorageList {
    pub storages: Vec<StorageSummary>,
}

/// `GET /api/v2/storages/{name}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageDetail {
    #[serde(flatten)]
    pub summary: StorageSummary,
    /// `other` for a directory of this machine (`data.path`); `unknown` for a claim on a
    /// cluster, whose volume the server does not read (`data.claimName`).
    #[serde(rename = "type")]
    pub kind: String,
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    pub read_only: bool,
}
