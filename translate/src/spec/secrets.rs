//! What a job spec holds that nobody may read back: protocol v2's `secrets` and the
//! registry credentials rendered from them. Neither type prints its values (`Debug`
//! shows the names only), and [`masked`] is the spec text as it may be kept and shown.

use std::fmt;

use serde_json::Value;

use pai_contract::SpecFormat;

/// What OpenPAI writes where the secrets were (`protocolSecret.js`).
pub const MASK: &str = "******";
/// The top-level field of a v2 spec holding secrets.
pub const FIELD: &str = "secrets";

/// A v2 job's `secrets`: any YAML value, usually a map of names to values.
#[derive(Clone, PartialEq)]
pub struct Secrets(Value);

impl Secrets {
    pub(crate) fn new(value: Value) -> Self {
        Self(value)
    }

    /// The value, for the file the runtime renders `<% $secrets.… %>` from.
    pub fn value(&self) -> &Value {
        &self.0
    }

    /// The JSON text of the file the task's runtime reads.
    pub fn to_json(&self) -> String {
        self.0.to_string()
    }

    /// Every string the secrets hold (for tests and for checks that nothing leaks).
    pub fn strings(&self) -> Vec<&str> {
        fn walk<'v>(value: &'v Value, out: &mut Vec<&'v str>) {
            match value {
                Value::String(s) => out.push(s),
                Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
                Value::Object(map) => map.values().for_each(|v| walk(v, out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        walk(&self.0, &mut out);
        out
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = match &self.0 {
            Value::Object(map) => map.keys().map(String::as_str).collect(),
            _ => Vec::new(),
        };
        f.debug_tuple("Secrets").field(&names).finish()
    }
}

/// Credentials for one registry (a v2 `dockerimage` prerequisite's `auth`, rendered).
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryAuth {
    /// `registryuri`; Docker Hub's address when not given, as Docker's clients use.
    pub registry: String,
    pub username: String,
    pub password: String,
}

impl fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("registry", &self.registry)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The `.dockerconfigjson` of a pull Secret holding `auths`, as `kubectl create secret
/// docker-registry` writes it.
pub fn docker_config_json(auths: &[RegistryAuth]) -> String {
    use base64::Engine;
    let mut map = serde_json::Map::new();
    for auth in auths {
        let pair = format!("{}:{}", auth.username, auth.password);
        map.insert(
            auth.registry.clone(),
            serde_json::json!({
                "username": auth.username,
                "password": auth.password,
                "auth": base64::engine::general_purpose::STANDARD.encode(pair),
            }),
        );
    }
    serde_json::json!({ "auths": map }).to_string()
}

/// `text` with the value of its top-level `secrets` replaced by `"******"`: what is kept
/// in the Framework and given back as the job's config. A YAML document keeps its own
/// text around the replaced block; anything the line cut cannot replace exactly (a flow
/// mapping, JSON, an odd layout) is written anew from the parsed document instead. The
/// result is checked by parsing it: it is the submitted document with nothing but the
/// secrets replaced.
pub fn masked(text: &str, format: SpecFormat) -> String {
    let Some(mut expected) = parse(text, format) else {
        return String::new();
    };
    let Some(slot) = expected.as_object_mut().and_then(|m| m.get_mut(FIELD)) else {
        return text.to_string();
    };
    *slot = Value::String(MASK.to_string());
    if format == SpecFormat::Yaml
        && let Some(cut) = cut_yaml_block(text)
        && parse(&cut, format).as_ref() == Some(&expected)
    {
        return cut;
    }
    match format {
        SpecFormat::Json => serde_json::to_string_pretty(&expected).unwrap_or_default(),
        SpecFormat::Yaml => serde_saphyr::to_string(&expected).unwrap_or_default(),
    }
}

fn parse(text: &str, format: SpecFormat) -> Option<Value> {
    super::reader::document(text, format).ok().map(|d| d.value)
}

/// The YAML text with the block of the top-level `secrets:` key replaced by one line.
fn cut_yaml_block(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.split_inclusive('\n').peekable();
    let mut found = false;
    while let Some(line) = lines.next() {
        if !found && (line.starts_with("secrets:") || line.starts_with("\"secrets\":")) {
            found = true;
            out.push_str(&format!("{FIELD}: \"{MASK}\"\n"));
            // The block: every following line that is indented, empty or a comment.
            while let Some(next) = lines.peek() {
                let continues = next.starts_with([' ', '\t', '#', '\n', '\r']);
                if !continues {
                    break;
                }
                lines.next();
            }
            continue;
        }
        out.push_str(line);
    }
    found.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yaml_block_is_replaced_in_place() {
        let text = "protocolVersion: 2\nname: j\nsecrets:\n  pw: hunter2\n  # old: swordfish\n  keys:\n    - k1\n\ntaskRoles:\n  a: {}\n";
        let out = masked(text, SpecFormat::Yaml);
        assert_eq!(
            out,
            "protocolVersion: 2\nname: j\nsecrets: \"******\"\ntaskRoles:\n  a: {}\n"
        );
        assert!(!out.contains("hunter2") && !out.contains("swordfish"));
    }

    #[test]
    fn odd_layouts_and_json_are_written_anew() {
        let flow = "{protocolVersion: 2, secrets: {pw: hunter2}, name: j}";
        let out = masked(flow, SpecFormat::Yaml);
        assert!(!out.contains("hunter2"), "{out}");
        assert!(out.contains("******"), "{out}");
        let json = r#"{"protocolVersion": 2, "secrets": {"pw": "hunter2"}, "name": "j"}"#;
        let out = masked(json, SpecFormat::Json);
        assert!(!out.contains("hunter2") && out.contains("******"), "{out}");
        // The last key of the document.
        let last = "name: j\nsecrets:\n  pw: hunter2";
        assert_eq!(
            masked(last, SpecFormat::Yaml),
            "name: j\nsecrets: \"******\"\n"
        );
    }

    #[test]
    fn a_spec_without_secrets_is_kept_as_it_is() {
        let text = "name: j  # a comment\ntaskRoles: {}\n";
        assert_eq!(masked(text, SpecFormat::Yaml), text);
    }

    #[test]
    fn debug_never_prints_values() {
        let secrets = Secrets::new(serde_json::json!({"pw": "hunter2"}));
        let auth = RegistryAuth {
            registry: "r".into(),
            username: "u".into(),
            password: "hunter2".into(),
        };
        let shown = format!("{secrets:?} {auth:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("pw"));
    }
}
