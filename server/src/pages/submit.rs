//! The portal's submission form: a job spec (v1 or v2, JSON or YAML) pasted or uploaded,
//! checked or submitted through the API's own code and authorization; the spec's errors
//! shown next to the lines they are about; a job cloned into the form under a new name.

use serde::Serialize;

use pai_translate::spec::{SpecErrors, SpecFormat};

use super::view::Frame;

/// What the form sent.
#[derive(Debug, Default)]
pub struct Sent {
    /// The spec: the uploaded file's text when one was chosen, else the pasted text.
    pub text: String,
    /// Only check it (a dry run), do not create the job.
    pub check: bool,
}

/// The largest spec the form takes, as the API's own body limit does by default.
pub const MAX_SPEC_BYTES: usize = 1024 * 1024;

/// Reads the form's fields (`spec`, `file`, `action`) from a multipart body.
pub async fn read(mut multipart: axum::extract::Multipart) -> Result<Sent, String> {
    let mut sent = Sent::default();
    let mut file: Option<String> = None;
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return Err(format!("the form could not be read: {e}")),
        };
        let name = field.name().unwrap_or_default().to_string();
        let bytes = field
            .bytes()
            .await
            .map_err(|e| format!("the form could not be read: {e}"))?;
        if bytes.len() > MAX_SPEC_BYTES {
            return Err(format!(
                "{name}: {} bytes; a spec is at most {MAX_SPEC_BYTES} bytes",
                bytes.len()
            ));
        }
        let text = || {
            String::from_utf8(bytes.to_vec())
                .map_err(|_| format!("{name}: the file is not UTF-8 text"))
        };
        match name.as_str() {
            "spec" => sent.text = text()?,
            "file" if !bytes.is_empty() => file = Some(text()?),
            "action" => sent.check = bytes.as_ref() == b"check",
            _ => {}
        }
    }
    if let Some(file) = file {
        sent.text = file;
    }
    Ok(sent)
}

/// One line of the spec as the form shows it back, with the errors about it.
#[derive(Serialize, Debug, PartialEq)]
pub struct Line {
    pub number: usize,
    pub text: String,
    pub errors: Vec<String>,
}

#[derive(Serialize, Default)]
pub struct SubmitPage {
    #[serde(flatten)]
    pub frame: Frame,
    /// The spec in the text area.
    pub text: String,
    /// The spec's lines with their errors, when it had errors that name a place.
    pub lines: Vec<Line>,
    /// Errors not about one line (or all of them, for a short spec).
    pub errors: Vec<String>,
    /// What the check found: warnings of a valid spec.
    pub warnings: Vec<String>,
    /// A check passed: `job NAME is valid (N tasks)`.
    pub valid: Option<String>,
    /// Submitted: the job's page.
    pub submitted: Option<Submitted>,
    /// The job this form was cloned from.
    pub cloned_from: Option<String>,
    /// The form holds [`EXAMPLE`], for a person to start from.
    pub example: bool,
    /// The job spec's reference (`/docs/reference#the-job-spec`).
    pub reference: String,
}

/// What a fresh form holds: a job that runs as it is, on this machine and on a cluster.
pub const EXAMPLE: &str = include_str!("../../../examples/shell-hello.yaml");

#[derive(Serialize)]
pub struct Submitted {
    pub job: String,
    pub url: String,
}

impl SubmitPage {
    /// The form, holding `text`.
    pub fn new(text: String) -> Self {
        Self {
            frame: Frame {
                title: "Submit a job".to_string(),
                ..Frame::default()
            },
            text,
            reference: format!(
                "{}#the-job-spec",
                pai_api::routes::DOCS_PAGE.with(&["reference"])
            ),
            ..Self::default()
        }
    }

    /// A fresh form: [`EXAMPLE`] in it.
    pub fn with_example() -> Self {
        Self {
            example: true,
            ..Self::new(EXAMPLE.to_string())
        }
    }

    /// The form showing `errors` of its spec: beside the lines they are about where the
    /// place is known, above the spec otherwise.
    pub fn with_spec_errors(mut self, errors: &SpecErrors) -> Self {
        let mut lines: Vec<Line> = self
            .text
            .lines()
            .enumerate()
            .map(|(i, text)| Line {
                number: i + 1,
                text: text.to_string(),
                errors: Vec::new(),
            })
            .collect();
        for error in errors.iter() {
            let said = error.to_string();
            match locate(&self.text, &error.path, &error.rule).and_then(|n| lines.get_mut(n - 1)) {
                Some(line) => line.errors.push(said),
                None => self.errors.push(said),
            }
        }
        if lines.iter().any(|l| !l.errors.is_empty()) {
            self.lines = lines;
        }
        self
    }
}

/// The line (from 1) an error is about: the one a parser named (`at line 3 column 5`),
/// else the line of the field its path names (`taskRoles[1].taskNumber`: the second
/// role's `taskNumber`), found by reading the text for each key of the path in turn.
pub fn locate(text: &str, path: &str, rule: &str) -> Option<usize> {
    if let Some(line) = named_line(rule) {
        return Some(line);
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut at = 0usize;
    let mut found = None;
    let segments: Vec<&str> = path.split('.').collect();
    for (i, segment) in segments.iter().enumerate() {
        let (key, index) = match segment.split_once('[') {
            Some((key, rest)) => (key, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (*segment, None),
        };
        if key.is_empty() || key == "(spec)" {
            return found;
        }
        let line = (at..lines.len()).find(|&n| is_key(lines[n], key))?;
        found = Some(line + 1);
        at = line + 1;
        if let Some(index) = index {
            // The index-th item: the index-th line, after the key, that holds the next
            // key of the path (or the index-th list item).
            let next_key = segments
                .get(i + 1)
                .map(|s| s.split('[').next().unwrap_or_default());
            let mut seen = 0;
            let item = (at..lines.len()).find(|&n| {
                let hit = match next_key {
                    Some(k) => is_key(lines[n], k),
                    None => lines[n].trim_start().starts_with('-'),
                };
                if hit {
                    seen += 1;
                }
                hit && seen == index + 1
            })?;
            found = Some(item + 1);
            at = item;
        }
    }
    found
}

/// Whether `line` sets `key` (YAML `key:` or `- key:` at its start, JSON `"key":`
/// anywhere in it).
fn is_key(line: &str, key: &str) -> bool {
    let t = line.trim_start().trim_start_matches(['-', ' ']);
    let yaml = t
        .strip_prefix(key)
        .is_some_and(|rest| rest.trim_start().starts_with(':'));
    let quoted = format!("\"{key}\"");
    yaml || line
        .match_indices(&quoted)
        .any(|(at, _)| line[at + quoted.len()..].trim_start().starts_with(':'))
}

/// `line N` in a parser's message.
fn named_line(rule: &str) -> Option<usize> {
    let at = rule.find("line ")?;
    let digits: String = rule[at + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok().filter(|&n: &usize| n > 0)
}

/// `text` with the job's name `old` replaced by `new` where the spec names it (v1's
/// `jobName`, v2's top-level `name`): the rest stays as written, comments included.
pub fn renamed(text: &str, format: SpecFormat, old: &str, new: &str) -> String {
    let keys: &[&str] = match format {
        SpecFormat::Json => &["jobName"],
        SpecFormat::Yaml => &["jobName", "name"],
    };
    let mut done = false;
    let mut out = String::with_capacity(text.len() + new.len());
    for line in text.split_inclusive('\n') {
        let top_level = matches!(format, SpecFormat::Json) || !line.starts_with([' ', '\t', '-']);
        let changed = (!done && top_level)
            .then(|| {
                keys.iter()
                    .filter(|k| is_key(line, k))
                    .find_map(|k| replace_value(line, k, old, new))
            })
            .flatten();
        match changed {
            Some(line) => {
                out.push_str(&line);
                done = true;
            }
            None => out.push_str(line),
        }
    }
    out
}

/// `line` with the first `old` after `key`'s colon written as `new`.
fn replace_value(line: &str, key: &str, old: &str, new: &str) -> Option<String> {
    let k = line.find(key)?;
    let colon = k + line[k..].find(':')?;
    let at = colon + line[colon..].find(old)?;
    Some(format!("{}{new}{}", &line[..at], &line[at + old.len()..]))
}

/// A new name for a clone of `job`: `job-2`, or `job-(n+1)` for `job-n`.
pub fn clone_name(job: &str) -> String {
    match job.rsplit_once('-') {
        Some((base, n)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => {
            match n.parse::<u64>() {
                Ok(n) => format!("{base}-{}", n + 1),
                Err(_) => format!("{job}-2"),
            }
        }
        _ => format!("{job}-2"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "jobName: hello\nimage: busybox\ntaskRoles:\n  - name: ps\n    taskNumber: 1\n    command: x\n  - name: worker\n    taskNumber: 0\n    command: y\n";

    #[test]
    fn errors_are_placed_on_the_line_of_their_field() {
        assert_eq!(
            locate(YAML, "taskRoles[1].taskNumber", "must be at least 1"),
            Some(8)
        );
        assert_eq!(locate(YAML, "taskRoles[0].taskNumber", "x"), Some(5));
        assert_eq!(locate(YAML, "image", "x"), Some(2));
        assert_eq!(locate(YAML, "(spec)", "x"), None);
        assert_eq!(locate(YAML, "nope", "x"), None);
        assert_eq!(
            locate("{}", "(spec)", "expected value at line 3 column 5"),
            Some(3)
        );
        let json = "{\n  \"jobName\": \"j\",\n  \"taskRoles\": [\n    {\"name\": \"a\", \"taskNumber\": 1},\n    {\"name\": \"b\",\n     \"taskNumber\": -1}\n  ]\n}\n";
        assert_eq!(locate(json, "taskRoles[1].taskNumber", "x"), Some(6));
    }

    #[test]
    fn a_clone_is_renamed_where_the_spec_names_the_job() {
        assert_eq!(clone_name("hello"), "hello-2");
        assert_eq!(clone_name("hello-2"), "hello-3");
        assert_eq!(clone_name("run-a"), "run-a-2");
        let cloned = renamed(YAML, SpecFormat::Yaml, "hello", "hello-2");
        assert!(cloned.starts_with("jobName: hello-2\n"), "{cloned}");
        assert!(
            cloned.contains("  - name: ps\n"),
            "a role's name is not the job's"
        );
        let v2 = "protocolVersion: 2\nname: train # the job\ntype: job\ntaskRoles:\n  train:\n    instances: 1\n";
        assert!(
            renamed(v2, SpecFormat::Yaml, "train", "train-2").contains("name: train-2 # the job\n")
        );
        let json = "{\"jobName\": \"j\", \"taskRoles\": []}";
        assert_eq!(
            renamed(json, SpecFormat::Json, "j", "j-2"),
            "{\"jobName\": \"j-2\", \"taskRoles\": []}"
        );
    }
}
