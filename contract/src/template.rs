//! OpenPAI protocol v2's `<% … %>` templates: a name such as `<% $parameters.lr %>` or
//! `<% $secrets.data[0] %>` is replaced by the value it names, as OpenPAI's rest-server
//! renders `$parameters`, `$script`, `$output` and `$data` into commands at submission
//! and its runtime renders `$secrets` inside the container. A name that names nothing is
//! kept as written (`<% name %>`, OpenPAI's behaviour), so the later pass can fill it.
//!
//! Values are written as JavaScript's `String(value)` writes them, since that is what
//! OpenPAI users saw: `1.0` as `1`, a list as its items joined by `,`. Values are never
//! escaped: a template sits in the user's own command.

use serde_json::Value;

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text outside any tag.
    Text(&'a str),
    /// `<% name %>`: the name, trimmed, with `[n]` written as `.n`.
    Name(String),
    /// A tag that is not a plain name (a mustache section, comment or partial), or an
    /// opening `<%` never closed: OpenPAI cannot render it either. Its whole text.
    Malformed(&'a str),
}

const OPEN: &str = "<%";
const CLOSE: &str = "%>";

/// The pieces of `template`, in order.
pub fn parse(template: &str) -> Vec<Piece<'_>> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find(OPEN) {
        if start > 0 {
            pieces.push(Piece::Text(&rest[..start]));
        }
        let after = &rest[start + OPEN.len()..];
        let Some(end) = after.find(CLOSE) else {
            pieces.push(Piece::Malformed(&rest[start..]));
            return pieces;
        };
        let inner = after[..end].trim();
        let whole = &rest[start..start + OPEN.len() + end + CLOSE.len()];
        // Mustache's other tags (sections, comments, partials, unescaped names, new
        // delimiters) produce nothing in OpenPAI's renderer.
        let plain =
            !inner.is_empty() && !inner.starts_with(['#', '^', '/', '!', '>', '{', '&', '=']);
        pieces.push(if plain {
            Piece::Name(bracket_to_dots(inner))
        } else {
            Piece::Malformed(whole)
        });
        rest = &after[end + CLOSE.len()..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    pieces
}

/// `a[0].b` → `a.0.b`, as OpenPAI rewrites names before looking them up.
fn bracket_to_dots(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut chars = name.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '['
            && let Some(close) = name[i..].find(']')
            && close > 1
            && name[i + 1..i + close].bytes().all(|b| b.is_ascii_digit())
        {
            out.push('.');
            out.push_str(&name[i + 1..i + close]);
            while chars.peek().is_some_and(|(j, _)| *j <= i + close) {
                chars.next();
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The value `name` (`$scope.a.b.0`) names in `context`, a map of scopes
/// (`{"$parameters": {...}}`); `None` when it names nothing or null.
pub fn lookup<'v>(context: &'v Value, name: &str) -> Option<&'v Value> {
    let mut at = context;
    for part in name.split('.') {
        at = match at {
            Value::Object(map) => map.get(part)?,
            Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    (!at.is_null()).then_some(at)
}

/// `value` as JavaScript's `String(value)` writes it.
pub fn js_string(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        // Array.prototype.toString: the items joined by ',', null items empty.
        Value::Array(items) => items.iter().map(js_string).collect::<Vec<_>>().join(","),
        Value::Object(_) => "[object Object]".to_string(),
    }
}

/// `template` with every name `context` holds replaced by its value; other names, and
/// malformed tags, kept as written (names in OpenPAI's normal form `<% name %>`).
pub fn render(template: &str, context: &Value) -> String {
    render_within(template, context, usize::MAX).unwrap_or_default()
}

/// The rendering would be longer than the limit given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rendered, it would be over {limit} bytes")]
pub struct TooLong {
    /// The limit.
    pub limit: usize,
}

/// [`render`], stopping as soon as the text passes `limit` bytes: a value named many
/// times cannot make it grow without bound.
pub fn render_within(template: &str, context: &Value, limit: usize) -> Result<String, TooLong> {
    let mut out = String::with_capacity(template.len().min(limit));
    for piece in parse(template) {
        match piece {
            Piece::Text(text) | Piece::Malformed(text) => out.push_str(text),
            Piece::Name(name) => match lookup(context, &name) {
                Some(value) => out.push_str(&js_string(value)),
                None => {
                    out.push_str("<% ");
                    out.push_str(&name);
                    out.push_str(" %>");
                }
            },
        }
        if out.len() > limit {
            return Err(TooLong { limit });
        }
    }
    Ok(out)
}

/// The names of `template` under `scope` (`$secrets`), e.g. `$secrets.password`.
pub fn names_in<'t>(template: &'t str, scope: &'t str) -> impl Iterator<Item = String> + 't {
    parse(template)
        .into_iter()
        .filter_map(move |piece| match piece {
            Piece::Name(name)
                if name == scope
                    || name
                        .strip_prefix(scope)
                        .is_some_and(|rest| rest.starts_with('.')) =>
            {
                Some(name)
            }
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_replaced_as_openpai_writes_values() {
        let context = json!({"$parameters": {
            "lr": 0.001, "epochs": 10, "whole": 2.0, "flag": true,
            "list": ["a", 1, null], "nested": {"x": "y"}, "text": "--opt 'q'"
        }});
        let template = "python a.py --lr <% $parameters.lr %> -e <%$parameters.epochs%> <% $parameters.whole %> <% $parameters.flag %> <% $parameters.list %> <% $parameters.list[1] %> <% $parameters.nested.x %> <% $parameters.nested %> <% $parameters.text %>";
        assert_eq!(
            render(template, &context),
            "python a.py --lr 0.001 -e 10 2 true a,1, 1 y [object Object] --opt 'q'"
        );
    }

    #[test]
    fn unknown_names_and_other_scopes_stay_for_the_runtime() {
        let context = json!({"$parameters": {"a": "1"}});
        assert_eq!(
            render(
                "x <%$secrets.pw%> <% $parameters.b %> <% $parameters.a %>",
                &context
            ),
            "x <% $secrets.pw %> <% $parameters.b %> 1"
        );
        let secrets = json!({"$secrets": {"pw": "p@ss word", "list": ["k0", "k1"]}});
        assert_eq!(
            render(
                "login -p <% $secrets.pw %> <% $secrets.list[1] %>",
                &secrets
            ),
            "login -p p@ss word k1"
        );
    }

    #[test]
    fn malformed_tags_are_kept_and_reported() {
        assert_eq!(
            parse("a <% #section %> b <% unclosed"),
            vec![
                Piece::Text("a "),
                Piece::Malformed("<% #section %>"),
                Piece::Text(" b "),
                Piece::Malformed("<% unclosed"),
            ]
        );
        // Not a name anything holds: kept, in OpenPAI's spacing.
        assert_eq!(render("a <%two words%>", &json!({})), "a <% two words %>");
    }

    #[test]
    fn a_rendering_stops_at_its_limit() {
        let context = json!({"$parameters": {"big": "x".repeat(1000)}});
        let template = "<% $parameters.big %>".repeat(100);
        assert_eq!(
            render_within(&template, &context, 10_000),
            Err(TooLong { limit: 10_000 })
        );
        assert_eq!(
            render_within(&template, &context, 100_000).map(|s| s.len()),
            Ok(100_000)
        );
    }

    #[test]
    fn secret_names_are_found() {
        let names: Vec<String> = names_in(
            "<% $secrets.a %> <% $secretsx %> <% $secrets.b[0] %>",
            "$secrets",
        )
        .collect();
        assert_eq!(names, vec!["$secrets.a", "$secrets.b.0"]);
    }
}
