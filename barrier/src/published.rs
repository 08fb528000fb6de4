//! The published peer table: one ConfigMap per Framework, `<framework>-peers`, holding
//! the running attempt's [`PeerTable`] (each attempt's replaces the last: one name, so the
//! job's Role names it once for every attempt) as `data.peers.json`, or, once
//! that JSON passes [`INLINE_MAX_BYTES`], gzipped as `binaryData.peers.json.gz` (as
//! FrameworkController compresses large statuses: fewer bytes to every task). rest-lite
//! writes it once every task of the attempt has an address; each task's barrier reads it
//! by name. It is owned by the Framework, so the garbage collector removes it with the
//! Framework. Both sides build and read it here, so they cannot disagree.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use pai_contract::Framework;
use pai_contract::meta;

use crate::peers::PeerTable;

/// The key of the table in the ConfigMap's `data`.
pub const DATA_KEY: &str = "peers.json";
/// The key of the gzipped table in the ConfigMap's `binaryData`.
pub const GZIP_KEY: &str = "peers.json.gz";
/// Larger tables (about 500 tasks and more) are gzipped.
pub const INLINE_MAX_BYTES: usize = 8 * 1024;
/// The most a gzipped table may inflate to (a ConfigMap holds 1 MiB; tables of 10,000
/// tasks are a fraction of that).
const MAX_INFLATED_BYTES: u64 = 16 * 1024 * 1024;
/// Label: the Framework the table belongs to.
pub const LABEL_FRAMEWORK: &str = "rest-lite.openpai.io/framework";
/// Label: the Framework attempt the table belongs to.
pub const LABEL_ATTEMPT: &str = "rest-lite.openpai.io/attempt";

/// The name of Framework `framework`'s table, every attempt's.
pub fn object_name(framework: &str) -> String {
    pai_contract::access::peer_table(framework)
}

/// The ConfigMap that publishes `table`, owned by `owner` (the Framework it describes).
pub fn config_map(table: &PeerTable, owner: &Framework) -> ConfigMap {
    let json = serde_json::to_string(table).unwrap_or_default();
    let (data, binary_data) = if json.len() > INLINE_MAX_BYTES {
        (
            None,
            Some(BTreeMap::from([(
                GZIP_KEY.to_string(),
                ByteString(gzip(json.as_bytes())),
            )])),
        )
    } else {
        (Some(BTreeMap::from([(DATA_KEY.to_string(), json)])), None)
    };
    let owner_reference = owner.owner_reference();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(object_name(&table.framework)),
            namespace: owner.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([
                (
                    meta::LABEL_MANAGED_BY.to_string(),
                    meta::MANAGED_BY.to_string(),
                ),
                (LABEL_FRAMEWORK.to_string(), table.framework.clone()),
                (LABEL_ATTEMPT.to_string(), table.attempt.to_string()),
            ])),
            owner_references: Some(vec![owner_reference]),
            ..ObjectMeta::default()
        },
        data,
        binary_data,
        ..ConfigMap::default()
    }
}

/// Why a ConfigMap is not the table asked for.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unusable {
    #[error("it has neither {DATA_KEY} nor {GZIP_KEY}")]
    Missing,
    #[error("its {DATA_KEY} is not a peer table: {0}")]
    Malformed(String),
    #[error("it belongs to attempt instance {found:?}, not {expected:?}")]
    OtherAttempt {
        expected: String,
        found: Option<String>,
    },
}

/// The table in `map` when it belongs to the attempt whose FrameworkController instance
/// UID is `instance_uid` (a table left from an earlier Framework of the same name has
/// another).
pub fn read(map: &ConfigMap, instance_uid: &str) -> Result<PeerTable, Unusable> {
    let inline = map.data.as_ref().and_then(|d| d.get(DATA_KEY));
    let gzipped = map.binary_data.as_ref().and_then(|d| d.get(GZIP_KEY));
    let table: PeerTable = match (inline, gzipped) {
        (Some(text), _) => serde_json::from_str(text),
        (None, Some(bytes)) => serde_json::from_slice(&gunzip(&bytes.0)?),
        (None, None) => return Err(Unusable::Missing),
    }
    .map_err(|e| Unusable::Malformed(e.to_string()))?;
    if table.attempt_instance_uid.as_deref() != Some(instance_uid) {
        return Err(Unusable::OtherAttempt {
            expected: instance_uid.to_string(),
            found: table.attempt_instance_uid,
        });
    }
    Ok(table)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(bytes);
    gz.finish().unwrap_or_default()
}

fn gunzip(bytes: &[u8]) -> Result<Vec<u8>, Unusable> {
    use std::io::Read;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(MAX_INFLATED_BYTES + 1)
        .read_to_end(&mut json)
        .map_err(|e| Unusable::Malformed(format!("not gzip: {e}")))?;
    if json.len() as u64 > MAX_INFLATED_BYTES {
        return Err(Unusable::Malformed(format!(
            "inflates past {MAX_INFLATED_BYTES} bytes"
        )));
    }
    Ok(json)
}
