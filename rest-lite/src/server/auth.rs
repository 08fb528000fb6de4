//! Bearer tokens from a file: each maps to a user, some users are admins. Tokens are
//! stored as SHA-256 hashes, never in clear. A user reads and changes only their own
//! jobs; another user's job is "not found", never "forbidden" (its existence is not told).
//!
//! ```yaml
//! users:
//!   - name: alice
//!     tokenSha256: 2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b
//!   - name: ops
//!     tokenSha256: …
//!     admin: true
//! ```
//! (`printf %s "$TOKEN" | sha256sum` gives the hash.)

use std::collections::HashMap;
use std::path::Path;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::AppState;
use super::error::ApiError;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub user: String,
    pub admin: bool,
}

impl Caller {
    /// Everything is allowed: the server runs without a token file (loopback only).
    pub fn anonymous_admin() -> Self {
        Self {
            user: String::new(),
            admin: true,
        }
    }

    /// May this caller act on `user`'s jobs?
    /// No rights at all (a request that never passed the authentication middleware).
    pub fn nobody() -> Self {
        Self {
            user: String::new(),
            admin: false,
        }
    }

    pub fn may_act_for(&self, user: &str) -> bool {
        self.admin || self.user == user
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    users: Vec<TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TokenEntry {
    name: String,
    token_sha256: String,
    #[serde(default)]
    admin: bool,
}

/// The token table: SHA-256 (hex) → caller.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    by_hash: HashMap<String, Caller>,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read token file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("token file {path} is not valid: {message}")]
    Invalid { path: String, message: String },
}

/// SHA-256 of `token`, lower-case hex.
pub fn hash(token: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

impl Tokens {
    pub fn load(path: &Path) -> Result<Self, TokenFileError> {
        let display = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: display.clone(),
            source,
        })?;
        let invalid = |message: String| TokenFileError::Invalid {
            path: display.clone(),
            message,
        };
        let file: TokenFile = serde_saphyr::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let mut by_hash = HashMap::new();
        for (i, entry) in file.users.into_iter().enumerate() {
            let digest = entry.token_sha256.trim().to_ascii_lowercase();
            if digest.len() != 64 || !digest.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(invalid(format!(
                    "users[{i}].tokenSha256 is not a SHA-256 in hex"
                )));
            }
            crate::spec::UserName::parse(&entry.name)
                .map_err(|rule| invalid(format!("users[{i}].name: {rule}")))?;
            let caller = Caller {
                user: entry.name,
                admin: entry.admin,
            };
            if by_hash.insert(digest, caller).is_some() {
                return Err(invalid(format!("users[{i}].tokenSha256 appears twice")));
            }
        }
        Ok(Self { by_hash })
    }

    /// Who holds `token`, if anyone.
    pub fn caller(&self, token: &str) -> Option<Caller> {
        self.by_hash.get(&hash(token)).cloned()
    }
}

/// The cookie the pages' sign-in sets: the token itself, HttpOnly (no script reads it)
/// and SameSite=Strict (no other site's page sends it).
pub const COOKIE: &str = "rest_lite_token";

/// The token in a `Cookie` header, percent-decoded as [`session_cookie`] encoded it.
pub fn token_from_cookies(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .and_then(|(_, value)| percent_decode(value))
        .filter(|t| !t.is_empty())
}

/// The `Set-Cookie` value keeping `token` for the pages (percent-encoded: a cookie value
/// may hold no `;`, `,`, space or quote, and a token may); `None` removes it.
pub fn session_cookie(token: Option<&str>) -> String {
    match token {
        Some(token) => format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age=2592000",
            crate::client::percent_encode(token, b"")
        ),
        None => format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    }
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The caller of a page: the bearer token or the sign-in cookie; `None` when the server
/// has a token file and the request carries no known token.
pub fn page_caller(state: &AppState, headers: &axum::http::HeaderMap) -> Option<Caller> {
    let Some(tokens) = &state.tokens else {
        return Some(Caller::anonymous_admin());
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .map(str::to_string);
    bearer
        .or_else(|| token_from_cookies(headers))
        .and_then(|t| tokens.caller(&t))
}

/// The token of an `Authorization` value: the scheme is case-insensitive (RFC 9110
/// §11.1), then at least one space.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Middleware: puts the [`Caller`] in the request, or answers 401.
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = match &state.tokens {
        None => Caller::anonymous_admin(),
        Some(tokens) => {
            let token = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(bearer_token);
            match token.and_then(|t| tokens.caller(t)) {
                Some(caller) => caller,
                None => {
                    return ApiError::unauthorized(
                        "a valid bearer token is required (Authorization: Bearer <token>)",
                    )
                    .into_response();
                }
            }
        }
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cookie_carries_any_token_back_unchanged() {
        for token in ["plain", "with space; and=semi,comma\"quote", "ünï", "%41"] {
            let set = session_cookie(Some(token));
            let value = set.split(';').next().expect("pair");
            let mut headers = axum::http::HeaderMap::new();
            let cookie = format!("other=1; {value}; last=2");
            headers.insert(header::COOKIE, cookie.parse().expect("ascii"));
            assert_eq!(
                token_from_cookies(&headers).as_deref(),
                Some(token),
                "{set}"
            );
        }
        assert!(session_cookie(None).contains("Max-Age=0"));
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        for value in ["Bearer tok", "bearer tok", "BEARER  tok", "BeArEr tok "] {
            assert_eq!(bearer_token(value), Some("tok"), "{value:?}");
        }
        for value in ["Basic tok", "Bearer", "Bearer ", "Bearertok", "tok"] {
            assert_eq!(bearer_token(value), None, "{value:?}");
        }
    }
}
