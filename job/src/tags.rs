//! A job's tags (OpenPAI's v2 API: `PUT`/`DELETE …/tag`, the list's `tagsContain`): a
//! JSON list of strings in the Framework's annotation [`ANNOTATION`], changed one tag at
//! a time by [`apply`], which both backends call on the Framework they change.

use std::collections::BTreeMap;

/// Annotation on a Framework: its tags, a JSON list of strings in the order added.
pub const ANNOTATION: &str = "rest-lite.openpai.io/tags";
/// Most tags a job has.
pub const MAX_TAGS: usize = 32;
/// Longest tag, in characters.
pub const MAX_TAG_CHARS: usize = 64;

/// One change of a job's tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    /// Adds the tag (nothing when it is there).
    Add(String),
    /// Removes the tag, which must be there.
    Remove(String),
}

/// Why a change cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    /// The tag breaks the rule.
    #[error(
        "tag {0:?}: 1 to {MAX_TAG_CHARS} characters, no ',' (the list's filters separate tags by it) and no control characters"
    )]
    Invalid(String),
    /// The job has as many tags as it may.
    #[error("the job has {MAX_TAGS} tags already: remove one first")]
    TooMany,
    /// The job has no such tag.
    #[error("the job has no tag {0:?}")]
    Missing(String),
}

/// Whether `tag` may be a tag.
pub fn valid(tag: &str) -> bool {
    (1..=MAX_TAG_CHARS).contains(&tag.chars().count())
        && !tag.contains(',')
        && !tag.contains(char::is_control)
}

/// The tags `annotations` hold (none when unreadable).
pub fn of(annotations: Option<&BTreeMap<String, String>>) -> Vec<String> {
    annotations
        .and_then(|a| a.get(ANNOTATION))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// Applies `edit` to the tags in `annotations`; whether anything changed.
pub fn apply(annotations: &mut BTreeMap<String, String>, edit: &Edit) -> Result<bool, TagError> {
    let mut tags = of(Some(annotations));
    match edit {
        Edit::Add(tag) if !valid(tag) => return Err(TagError::Invalid(tag.clone())),
        Edit::Add(tag) if tags.contains(tag) => return Ok(false),
        Edit::Add(_) if tags.len() >= MAX_TAGS => return Err(TagError::TooMany),
        Edit::Add(tag) => tags.push(tag.clone()),
        Edit::Remove(tag) => {
            let before = tags.len();
            tags.retain(|t| t != tag);
            if tags.len() == before {
                return Err(TagError::Missing(tag.clone()));
            }
        }
    }
    if tags.is_empty() {
        annotations.remove(ANNOTATION);
    } else {
        annotations.insert(
            ANNOTATION.to_string(),
            serde_json::to_string(&tags).unwrap_or_default(),
        );
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_added_once_removed_when_there_and_checked() {
        let mut annotations = BTreeMap::new();
        assert_eq!(apply(&mut annotations, &Edit::Add("a".into())), Ok(true));
        assert_eq!(apply(&mut annotations, &Edit::Add("a".into())), Ok(false));
        assert_eq!(apply(&mut annotations, &Edit::Add("b c".into())), Ok(true));
        assert_eq!(of(Some(&annotations)), ["a", "b c"]);
        assert_eq!(
            apply(&mut annotations, &Edit::Remove("x".into())),
            Err(TagError::Missing("x".into()))
        );
        for bad in ["", "a,b", "new\nline", &"x".repeat(65), "\u{85}"] {
            assert_eq!(
                apply(&mut annotations, &Edit::Add(bad.to_string())),
                Err(TagError::Invalid(bad.to_string()))
            );
        }
        // Characters, not bytes: 64 of them, of two bytes each.
        assert_eq!(
            apply(&mut annotations, &Edit::Add("é".repeat(64))),
            Ok(true)
        );
        assert_eq!(
            apply(&mut annotations, &Edit::Remove("é".repeat(64))),
            Ok(true)
        );
        assert_eq!(apply(&mut annotations, &Edit::Remove("a".into())), Ok(true));
        assert_eq!(
            apply(&mut annotations, &Edit::Remove("b c".into())),
            Ok(true)
        );
        assert!(annotations.is_empty(), "no empty list is kept");
        for i in 0..MAX_TAGS {
            apply(&mut annotations, &Edit::Add(format!("t{i}"))).expect("room");
        }
        assert_eq!(
            apply(&mut annotations, &Edit::Add("one more".into())),
            Err(TagError::TooMany)
        );
    }
}
