//! The API's addresses: user and job names as path segments and query values.

/// Every byte but letters, digits, `-._~` and those of `keep` as `%XX`.
pub fn percent_encode(text: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) || keep.contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A path segment or query value: everything but letters, digits and `-._~` encoded.
pub fn segment(text: &str) -> String {
    percent_encode(text, b"")
}
