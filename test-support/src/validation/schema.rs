//! OpenAPI v3 structural schemas, as much of them as our CRDs use, and checking an object
//! against one as the API server does: types, patterns, enums, bounds, quantities,
//! defaults, and the pruning of fields the schema does not describe.

use serde_json::{Value, json};

use super::causes::{Cause, invalid, join};

/// A `pattern` of a string schema: its text (for messages) and a matcher for it.
type Pattern = (&'static str, fn(&str) -> bool);

/// A node of an OpenAPI v3 structural schema, as much of it as FrameworkController uses.
pub(super) enum Schema {
    Object {
        properties: Vec<(&'static str, Schema)>,
        /// `x-kubernetes-preserve-unknown-fields: true`: nothing below is checked or pruned.
        preserve_unknown: bool,
        nullable: bool,
    },
    Array(Box<Schema>),
    String {
        pattern: Option<Pattern>,
        enumeration: &'static [&'static str],
        nullable: bool,
    },
    Integer {
        minimum: Option<i64>,
        maximum: Option<i64>,
        nullable: bool,
    },
    Boolean,
    /// An object whose every value has this schema (`additionalProperties`).
    Map(Box<Schema>),
    /// `x-kubernetes-int-or-string` with a Kubernetes quantity's pattern.
    Quantity,
    /// A string, `default` when absent.
    Defaulted(&'static str),
}

const INT32: (Option<i64>, Option<i64>) = (Some(i32::MIN as i64), Some(i32::MAX as i64));

/// An int32.
pub(super) fn int32() -> Schema {
    integer(INT32.0, INT32.1)
}

/// A string, any.
pub(super) fn plain_string() -> Schema {
    Schema::String {
        pattern: None,
        enumeration: &[],
        nullable: false,
    }
}

/// An object of these properties (the rest pruned).
pub(super) fn object(properties: Vec<(&'static str, Schema)>) -> Schema {
    Schema::Object {
        properties,
        preserve_unknown: false,
        nullable: false,
    }
}

/// An object kept as it is (`x-kubernetes-preserve-unknown-fields`).
pub(super) fn preserved(nullable: bool) -> Schema {
    Schema::Object {
        properties: Vec::new(),
        preserve_unknown: true,
        nullable,
    }
}

/// An integer within these bounds.
pub(super) fn integer(minimum: Option<i64>, maximum: Option<i64>) -> Schema {
    Schema::Integer {
        minimum,
        maximum,
        nullable: false,
    }
}

/// The pattern of a quantity in the CRDs' `minResources`.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Whether `s` is a quantity by [`QUANTITY_PATTERN`].
fn quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let number_ok = match number.split_once('.') {
        None => !number.is_empty(),
        Some((whole, fraction)) => {
            !fraction.contains('.') && (!whole.is_empty() || !fraction.is_empty())
        }
    };
    let exponent = |e: &str| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty()
            && e.split('.').count() <= 2
            && e.chars().all(|c| c.is_ascii_digit() || c == '.')
            && e != "."
    };
    number_ok
        && (matches!(
            suffix,
            "" | "Ki"
                | "Mi"
                | "Gi"
                | "Ti"
                | "Pi"
                | "Ei"
                | "n"
                | "u"
                | "m"
                | "k"
                | "M"
                | "G"
                | "T"
                | "P"
                | "E"
        ) || suffix.strip_prefix(['e', 'E']).is_some_and(exponent))
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Checks `value` at `path` against `schema`, pruning what it does not describe.
pub(super) fn check(schema: &Schema, value: &mut Value, path: &str, causes: &mut Vec<Cause>) {
    let wrong_type = |expected: &str, value: &Value, causes: &mut Vec<Cause>| {
        causes.push(invalid(
            path,
            &json!(type_name(value)),
            format!(
                "{path} in body must be of type {expected}: {:?}",
                type_name(value)
            ),
        ));
    };
    match schema {
        Schema::Object {
            properties,
            preserve_unknown,
            nullable,
        } => {
            if value.is_null() && *nullable {
                return;
            }
            let Some(fields) = value.as_object_mut() else {
                return wrong_type("object", value, causes);
            };
            if *preserve_unknown {
                return;
            }
            // Pruning: a structural schema drops what it does not describe (metadata is
            // ObjectMeta, kept apart).
            let top = path.is_empty();
            fields.retain(|k, _| {
                (top && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                    || properties.iter().any(|(name, _)| name == k)
            });
            for (name, schema) in properties {
                if let (Schema::Defaulted(default), None) = (schema, fields.get(*name)) {
                    fields.insert(name.to_string(), json!(default));
                }
                if let Some(child) = fields.get_mut(*name) {
                    check(schema, child, &join(path, name), causes);
                }
            }
        }
        Schema::Array(items) => {
            let Some(elements) = value.as_array_mut() else {
                return wrong_type("array", value, causes);
            };
            for (i, element) in elements.iter_mut().enumerate() {
                check(items, element, &format!("{path}[{i}]"), causes);
            }
        }
        Schema::String {
            pattern,
            enumeration,
            nullable,
        } => {
            if value.is_null() && *nullable {
                return;
            }
            let Some(s) = value.as_str() else {
                return wrong_type("string", value, causes);
            };
            if let Some((pattern, matches)) = pattern
                && !matches(s)
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{path} in body should match '{pattern}'"),
                ));
            }
            if !enumeration.is_empty() && !enumeration.contains(&s) {
                let supported: Vec<String> = enumeration.iter().map(|e| format!("{e:?}")).collect();
                causes.push(Cause {
                    reason: "FieldValueNotSupported",
                    field: path.to_string(),
                    message: format!(
                        "Unsupported value: {value}: supported values: {}",
                        supported.join(", ")
                    ),
                });
            }
        }
        Schema::Integer {
            minimum,
            maximum,
            nullable,
        } => {
            if value.is_null() && *nullable {
                return;
            }
            let Some(n) = value.as_i64() else {
                return wrong_type("integer", value, causes);
            };
            if let Some(min) = minimum
                && n < *min
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{path} in body should be greater than or equal to {min}"),
                ));
            }
            if let Some(max) = maximum
                && n > *max
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{path} in body should be less than or equal to {max}"),
                ));
            }
        }
        Schema::Boolean => {
            if !value.is_boolean() {
                wrong_type("boolean", value, causes);
            }
        }
        Schema::Map(values) => {
            let Some(fields) = value.as_object_mut() else {
                return wrong_type("object", value, causes);
            };
            for (key, child) in fields.iter_mut() {
                check(values, child, &join(path, key), causes);
            }
        }
        Schema::Quantity => match value {
            Value::Number(n) if n.is_i64() || n.is_u64() => {}
            Value::String(s) if quantity(s) => {}
            Value::String(_) => causes.push(invalid(
                path,
                value,
                format!("{path} in body should match '{QUANTITY_PATTERN}'"),
            )),
            other => wrong_type("integer or string", other, causes),
        },
        Schema::Defaulted(_) => {
            if !value.is_string() {
                wrong_type("string", value, causes);
            }
        }
    }
}
