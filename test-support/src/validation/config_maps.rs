//! ConfigMaps and Secrets: their keys, and what they hold together at most (1 MiB);
//! a Secret's values base64.

use serde_json::{Value, json};

use super::causes::{Cause, invalid};

/// A ConfigMap's keys (`[-._a-zA-Z0-9]+`, at most 253) and its size: `data` and
/// `binaryData` (decoded) together at most 1 MiB, as the API server's validation says.
pub(super) fn config_map(object: &Value, causes: &mut Vec<Cause>) {
    let mut total = 0;
    for field in ["data", "binaryData"] {
        let Some(entries) = object[field].as_object() else {
            continue;
        };
        for (key, value) in entries {
            let ok = (1..=253).contains(&key.len())
                && key
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
            if !ok {
                causes.push(invalid(
                    &format!("{field}[{key}]"),
                    &json!(key),
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
                        .into(),
                ));
            }
            // `binaryData` is counted as the bytes it encodes, as the API server counts
            // it (its values are bytes; base64 is only their JSON form).
            let text = value.as_str().unwrap_or_default();
            let bytes = match field {
                "binaryData" => {
                    let pad = text.bytes().rev().take_while(|b| *b == b'=').count();
                    (text.len() / 4 * 3).saturating_sub(pad)
                }
                _ => text.len(),
            };
            total += key.len() + bytes;
        }
    }
    if total > MAX_CONFIG_MAP_BYTES {
        causes.push(Cause {
            reason: "FieldValueTooLong",
            field: "data".into(),
            message: format!("Too long: must have at most {MAX_CONFIG_MAP_BYTES} bytes"),
        });
    }
}

/// The most a ConfigMap may hold.
pub const MAX_CONFIG_MAP_BYTES: usize = 1024 * 1024;

/// A Secret: the same key rules and size limit as a ConfigMap's; `data` values are
/// base64.
pub(super) fn secret(object: &Value, causes: &mut Vec<Cause>) {
    config_map(object, causes);
    for (key, value) in object["data"].as_object().into_iter().flatten() {
        use base64::Engine;
        let ok = value
            .as_str()
            .is_some_and(|v| base64::engine::general_purpose::STANDARD.decode(v).is_ok());
        if !ok {
            causes.push(invalid(
                &format!("data[{key}]"),
                value,
                "illegal base64 data".into(),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::admit;

    #[test]
    fn config_maps_have_valid_keys_and_fit_one_mebibyte() {
        let map = |key: &str, size: usize| json!({"metadata": {"name": "fw-peers-0"}, "data": {key: "x".repeat(size)}});
        admit("configmaps", &mut map("peers.json", 1000)).expect("valid");
        // binaryData counts as the bytes it encodes: 900 KiB is 1.2 MB of base64.
        let binary = |size: usize| json!({"metadata": {"name": "fw-logs"}, "binaryData": {"a.0.main": "AAAA".repeat(size / 3)}});
        admit("configmaps", &mut binary(900 * 1024)).expect("900 KiB fits");
        admit("configmaps", &mut binary(MAX_CONFIG_MAP_BYTES)).expect_err("1 MiB and a key do not");
        let err =
            admit("configmaps", &mut map("peers.json", MAX_CONFIG_MAP_BYTES)).expect_err("big");
        assert!(
            err.message().contains("must have at most 1048576 bytes"),
            "{}",
            err.message()
        );
        let err = admit("configmaps", &mut map("a/b", 1)).expect_err("bad key");
        assert!(err.message().contains("data[a/b]"), "{}", err.message());
        let mut owned = map("k", 1);
        owned["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "Framework", "name": "fw", "uid": ""}]);
        let err = admit("configmaps", &mut owned).expect_err("owner without uid");
        assert!(
            err.message().contains("ownerReferences[0].uid"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn secrets_hold_base64() {
        let mut good = json!({"metadata": {"name": "fw-ssh"}, "data": {"id_ed25519": "aGk="}});
        admit("secrets", &mut good).expect("valid");
        let mut bad = json!({"metadata": {"name": "fw-ssh"}, "data": {"id": "not base64!"}});
        let err = admit("secrets", &mut bad).expect_err("invalid");
        assert!(err.message().contains("data[id]"), "{}", err.message());
    }
}
