//! The API's addresses: user and job names as path segments and query values, encoded
//! by the `percent-encoding` crate.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What a segment leaves as it is: letters, digits and `-._~` (RFC 3986's unreserved).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A path, whose `/` stay.
const PATH: &AsciiSet = &SEGMENT.remove(b'/');

/// A path segment or query value: everything but letters, digits and `-._~` encoded.
pub fn segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// A path of ours as a query value (`next=/ui/jobs/alice/j`): as [`segment`], `/` kept.
pub fn path(text: &str) -> String {
    utf8_percent_encode(text, PATH).to_string()
}

/// `text` decoded (`%XX` as bytes), when the bytes are UTF-8.
pub fn decode(text: &str) -> Option<String> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(|t| t.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_travel_encoded_and_back() {
        assert_eq!(segment("alice~job-1.a_b"), "alice~job-1.a_b");
        assert_eq!(segment("a b/c;d%é"), "a%20b%2Fc%3Bd%25%C3%A9");
        assert_eq!(path("/ui/jobs/a b"), "/ui/jobs/a%20b");
        for text in ["a b/c;d%é", "alice's token; with a space", ""] {
            assert_eq!(decode(&segment(text)).as_deref(), Some(text));
        }
        assert_eq!(decode("%FF"), None, "not UTF-8");
    }
}
