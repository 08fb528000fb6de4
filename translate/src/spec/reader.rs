//! Typed reads from a parsed document that record every problem instead of stopping at
//! the first, so a user sees all of them at once.

use serde_json::{Map, Value};

use super::error::{Errors, FieldPath, SpecErrors};
use pai_contract::SpecFormat;

/// A parsed document, and the keys of its top-level `taskRoles` map in the order they
/// are written (a parsed map keeps no order; a v2 job's roles are listed as written).
pub(crate) struct Document {
    pub value: Value,
    pub role_order: Vec<String>,
}

/// The document `text` holds, in either format; one document only. Parsed once, the
/// roles' order noted on the way.
pub(crate) fn document(text: &str, format: SpecFormat) -> Result<Document, SpecErrors> {
    use serde::de::DeserializeSeed;
    let root = FieldPath::root();
    let mut role_order = Vec::new();
    let seed = Collect {
        roles: Some(&mut role_order),
        depth: 0,
    };
    let value = match format {
        SpecFormat::Json => {
            // OpenPAI's portal took JSON with comments (it ran strip-json-comments
            // before JSON.parse); its published job files have them.
            let text = &without_comments(text)
                .map_err(|rule| SpecErrors::single(&root, format!("not valid JSON: {rule}")))?;
            let mut de = serde_json::Deserializer::from_str(text);
            seed.deserialize(&mut de)
                .and_then(|v| de.end().map(|()| v))
                .map_err(|e| SpecErrors::single(&root, format!("not valid JSON: {e}")))?
        }
        SpecFormat::Yaml => {
            // Whatever a document says, what it costs to read is bounded: the text is at
            // most `MAX_SPEC_BYTES` before it gets here, and serde-saphyr's default
            // budgets bound what aliases may expand to (an alias bomb ends as an error).
            // The fuzz target (`translate/fuzz`) reads arbitrary bytes this way.
            serde_saphyr::with_deserializer_from_str(text, |de| seed.deserialize(de)).map_err(
                |e| match e.without_snippet() {
                    serde_saphyr::Error::MultipleDocuments { location, .. } => SpecErrors::single(
                        &root,
                        format!(
                            "the file holds more than one YAML document (another starts with '---' at line {}): a job is one document; a v2 job's secrets go under its own `secrets:` field",
                            location.line()
                        ),
                    ),
                    other => SpecErrors::single(&root, format!("not valid YAML: {other}")),
                },
            )?
        }
    };
    Ok(Document { value, role_order })
}

/// `text` with its `//` and `/* */` comments outside strings turned into spaces (line
/// breaks kept, so a parse error's line and column still point into the file as
/// written). Not a crate: `json_comments` turns the line breaks inside a block comment
/// into spaces, which moves every later error's line number.
fn without_comments(text: &str) -> Result<std::borrow::Cow<'_, str>, String> {
    if !text.contains('/') {
        return Ok(std::borrow::Cow::Borrowed(text));
    }
    enum State {
        Code,
        Text,
        Escape,
        Line,
        Block { line: usize },
    }
    let mut out = String::with_capacity(text.len());
    let mut state = State::Code;
    let mut line = 1;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
        state = match state {
            State::Code => match (c, chars.peek()) {
                ('"', _) => {
                    out.push(c);
                    State::Text
                }
                ('/', Some('/')) => {
                    chars.next();
                    out.push_str("  ");
                    State::Line
                }
                ('/', Some('*')) => {
                    chars.next();
                    out.push_str("  ");
                    State::Block { line }
                }
                _ => {
                    out.push(c);
                    State::Code
                }
            },
            State::Text => {
                out.push(c);
                match c {
                    '\\' => State::Escape,
                    '"' => State::Code,
                    _ => State::Text,
                }
            }
            State::Escape => {
                out.push(c);
                State::Text
            }
            State::Line => {
                out.push(blank(c));
                if c == '\n' { State::Code } else { State::Line }
            }
            State::Block { line: start } => {
                out.push(blank(c));
                if c == '*' && chars.peek() == Some(&'/') {
                    chars.next();
                    out.push(' ');
                    State::Code
                } else {
                    State::Block { line: start }
                }
            }
        };
        if c == '\n' {
            line += 1;
        }
    }
    match state {
        State::Block { line } => Err(format!(
            "the comment opened with /* at line {line} is never closed"
        )),
        _ => Ok(std::borrow::Cow::Owned(out)),
    }
}

/// The document a spec's text holds (JSON with comments, or YAML), as validation reads
/// it: for tools and tests that look at what a user wrote.
pub fn value(text: &str, format: SpecFormat) -> Result<Value, SpecErrors> {
    document(text, format).map(|d| d.value)
}

/// Deserializes any value as a [`Value`]; at the top (`depth` 0) the keys of the
/// `taskRoles` map are noted, in order, into `roles`.
struct Collect<'o> {
    roles: Option<&'o mut Vec<String>>,
    depth: u8,
}

impl<'de> serde::de::DeserializeSeed<'de> for Collect<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Collect<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON or YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        serde::de::DeserializeSeed::deserialize(self, d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let Collect { mut roles, depth } = self;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = match roles.as_deref_mut() {
                // The roles' map: its keys in order, its values as they are.
                Some(order) if depth == 1 => {
                    order.push(key.clone());
                    map.next_value::<Value>()?
                }
                Some(_) if depth == 0 && key == "taskRoles" => map.next_value_seed(Collect {
                    roles: roles.as_deref_mut(),
                    depth: 1,
                })?,
                _ => map.next_value::<Value>()?,
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// JSON's name for the kind of a value, for messages.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

/// An object whose fields are read one by one; [`Object::finish`] reports the fields
/// nobody asked for.
pub(crate) struct Object<'a> {
    path: FieldPath,
    map: &'a Map<String, Value>,
    known: &'static [&'static str],
}

impl<'a> Object<'a> {
    /// `value` as an object whose fields may be `known`; an error if it is not one.
    pub(crate) fn new(
        value: &'a Value,
        path: FieldPath,
        known: &'static [&'static str],
        errors: &mut Errors,
    ) -> Option<Self> {
        match value {
            Value::Object(map) => Some(Self { path, map, known }),
            other => {
                errors.push(&path, format!("must be an object, got {}", kind(other)));
                None
            }
        }
    }

    pub(crate) fn path(&self, key: &str) -> FieldPath {
        self.path.field(key)
    }

    /// The field's value; `null` reads as absent.
    pub(crate) fn optional(&self, key: &str) -> Option<(&'a Value, FieldPath)> {
        debug_assert!(self.known.contains(&key), "{key} is not declared known");
        match self.map.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some((v, self.path(key))),
        }
    }

    /// Whether the field is written at all, `null` included.
    pub(crate) fn given(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The field's value, or an error saying it is required.
    pub(crate) fn required(
        &self,
        key: &str,
        errors: &mut Errors,
    ) -> Option<(&'a Value, FieldPath)> {
        let found = self.optional(key);
        if found.is_none() {
            errors.push(&self.path(key), "is required");
        }
        found
    }

    /// Reports every field that is not known, suggesting the closest known one.
    pub(crate) fn finish(self, errors: &mut Errors) {
        for key in self.map.keys() {
            if self.known.contains(&key.as_str()) {
                continue;
            }
            let rule = match suggest(key, self.known) {
                Some(best) => format!("unknown field, did you mean {best:?}?"),
                None => format!("unknown field; known fields are {}", self.known.join(", ")),
            };
            errors.push(&self.path(key), rule);
        }
    }
}

/// The known name closest to `key`, if it is close enough to be a typo of it.
pub(crate) fn suggest(key: &str, known: &[&'static str]) -> Option<&'static str> {
    let lower = key.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (strsim::levenshtein(&lower, &k.to_ascii_lowercase()), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

pub(crate) fn string<'a>(
    value: &'a Value,
    path: &FieldPath,
    errors: &mut Errors,
) -> Option<&'a str> {
    match value {
        Value::String(s) => Some(s),
        other => {
            errors.push(path, format!("must be a string, got {}", kind(other)));
            None
        }
    }
}

/// A non-empty string without NUL characters (which no process argument or
/// environment value can hold).
pub(crate) fn text<'a>(value: &'a Value, path: &FieldPath, errors: &mut Errors) -> Option<&'a str> {
    let s = string(value, path, errors)?;
    if s.trim().is_empty() {
        errors.push(path, "must not be empty");
        None
    } else if s.contains('\0') {
        errors.push(path, "must not contain a NUL character");
        None
    } else {
        Some(s)
    }
}

/// An integer within `min..=max`.
pub(crate) fn integer(
    value: &Value,
    path: &FieldPath,
    min: i64,
    max: i64,
    errors: &mut Errors,
) -> Option<i64> {
    let n = match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            // 2.0 from YAML or a generator is still the integer 2.
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        }),
        _ => None,
    };
    match n {
        Some(n) if (min..=max).contains(&n) => Some(n),
        Some(n) => {
            errors.push(path, format!("{}, got {n}", range_rule(min, max)));
            None
        }
        None => {
            let got = match value {
                Value::Number(n) => n.to_string(),
                other => kind(other).to_string(),
            };
            errors.push(path, format!("{}, got {got}", range_rule(min, max)));
            None
        }
    }
}

fn range_rule(min: i64, max: i64) -> String {
    if max == i64::from(i32::MAX) {
        format!("must be an integer ≥ {min}")
    } else {
        format!("must be an integer from {min} to {max}")
    }
}

pub(crate) fn list<'a>(
    value: &'a Value,
    path: &FieldPath,
    errors: &mut Errors,
) -> Option<&'a [Value]> {
    match value {
        Value::Array(items) => Some(items),
        other => {
            errors.push(path, format!("must be a list, got {}", kind(other)));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_catch_typos_not_strangers() {
        let known = &["taskNumber", "taskRoles", "memoryMB"];
        assert_eq!(suggest("tasknumber", known), Some("taskNumber"));
        assert_eq!(suggest("memoryMb", known), Some("memoryMB"));
        assert_eq!(suggest("taskRole", known), Some("taskRoles"));
        assert_eq!(suggest("colour", known), None);
    }

    #[test]
    fn comments_go_and_strings_keep_their_slashes() {
        let text = "{\n  // a comment \"with quotes\"\n  \"a\": \"http://x/*y*/\", /* one\n two */ \"b\": 1 // end\n}";
        let stripped = without_comments(text).expect("strips");
        assert_eq!(stripped.lines().count(), text.lines().count());
        let value: Value = serde_json::from_str(&stripped).expect("json");
        assert_eq!(value["a"], "http://x/*y*/");
        assert_eq!(value["b"], 1);
        // An error after a block comment still names the line it is on.
        let bad = "{\n/* one\ntwo */\n\"a\": }";
        let e = document(bad, SpecFormat::Json).err().expect("invalid");
        assert!(e.to_string().contains("line 4"), "{e}");
        let open = document("{/* never closed\n}", SpecFormat::Json)
            .err()
            .expect("invalid");
        assert!(
            open.to_string().contains("opened with /* at line 1"),
            "{open}"
        );
        // An escaped quote does not end the string.
        let escaped = without_comments(r#"{"a": "\" // not a comment"}"#).expect("strips");
        assert!(escaped.contains("// not a comment"));
    }
}
