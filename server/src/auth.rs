//! Bearer tokens from a file: each maps to a user, some users are admins. Tokens are
//! stored as SHA-256 hashes, never in clear. A user reads and changes only their own
//! jobs; another user's job is "not found", never "forbidden" (its existence is not told).
//!
//! ```yaml
//! users:
//!   - name: alice
//!     tokenSha256: 2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b
//!     groups: [vision]
//!   - name: ops
//!     tokenSha256: …
//!     admin: true
//! ```
//! (`printf %s "$TOKEN" | sha256sum` gives the hash.)

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::error::ApiError;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub user: String,
    pub admin: bool,
    /// The groups the token file gives the user (who may use which storage).
    pub groups: Vec<String>,
}

impl Caller {
    /// Everything is allowed: a server embedded with [`Access::Open`].
    pub fn anonymous_admin() -> Self {
        Self {
            user: String::new(),
            admin: true,
            groups: Vec::new(),
        }
    }

    /// No rights at all (a request that never passed the authentication middleware).
    pub fn nobody() -> Self {
        Self {
            user: String::new(),
            admin: false,
            groups: Vec::new(),
        }
    }

    /// Who it is, as storages see it.
    pub fn who(&self) -> pai_translate::storages::Who<'_> {
        pai_translate::storages::Who {
            user: &self.user,
            groups: &self.groups,
            admin: self.admin,
        }
    }

    /// May this caller act on `user`'s jobs?
    pub fn may_act_for(&self, user: &str) -> bool {
        self.admin || self.user == user
    }
}

/// Who may call the server.
#[derive(Clone)]
pub enum Access {
    /// Every caller may do everything. For a server embedded in a program or a test that
    /// alone decides who reaches it; `rest-lite serve` and `rest-lite run` never use it.
    Open,
    /// Only holders of a token of the table.
    Tokens(Arc<TokenTable>),
}

impl Access {
    /// The caller holding `token`, if the server knows it.
    pub fn caller(&self, token: Option<&str>) -> Option<Caller> {
        match self {
            Self::Open => Some(Caller::anonymous_admin()),
            Self::Tokens(table) => table.caller(token?),
        }
    }

    /// Whether callers sign in (and so have a name to show).
    pub fn signs_in(&self) -> bool {
        matches!(self, Self::Tokens(_))
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
    /// The user's groups (storages name the groups that may use them).
    #[serde(default)]
    groups: Vec<String>,
}

/// A set of tokens, each kept only as its SHA-256, with the caller it stands for.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    entries: Vec<([u8; 32], Caller)>,
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
    digest(token).iter().map(|b| format!("{b:02x}")).collect()
}

fn digest(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Equal, in a time that depends only on the length (which is always 32 here).
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

fn from_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Tokens {
    /// One token, standing for `caller`.
    pub fn single(token: &str, caller: Caller) -> Self {
        Self {
            entries: vec![(digest(token), caller)],
        }
    }

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
        let mut entries: Vec<([u8; 32], Caller)> = Vec::new();
        for (i, entry) in file.users.into_iter().enumerate() {
            let digest = from_hex(entry.token_sha256.trim()).ok_or_else(|| {
                invalid(format!("users[{i}].tokenSha256 is not a SHA-256 in hex"))
            })?;
            pai_translate::spec::UserName::parse(&entry.name)
                .map_err(|rule| invalid(format!("users[{i}].name: {rule}")))?;
            if entries.iter().any(|(d, _)| same(d, &digest)) {
                return Err(invalid(format!("users[{i}].tokenSha256 appears twice")));
            }
            let caller = Caller {
                user: entry.name,
                admin: entry.admin,
                groups: entry.groups,
            };
            entries.push((digest, caller));
        }
        Ok(Self { entries })
    }

    /// Who holds `token`, if anyone. Every entry is compared, each in constant time.
    pub fn caller(&self, token: &str) -> Option<Caller> {
        let presented = digest(token);
        let mut found = None;
        for (digest, caller) in &self.entries {
            if same(digest, &presented) && found.is_none() {
                found = Some(caller);
            }
        }
        found.cloned()
    }

    /// How many tokens stand for user `name`.
    pub fn of_user(&self, name: &str) -> usize {
        self.entries.iter().filter(|(_, c)| c.user == name).count()
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// How often a token file is looked at for changes.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// The tokens a server accepts now: fixed, or a token file read again whenever it
/// changes (a removed token stops working within [`RELOAD_INTERVAL`], no restart).
pub struct TokenTable {
    current: RwLock<Arc<Tokens>>,
}

impl TokenTable {
    /// Tokens that never change.
    pub fn fixed(tokens: Tokens) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new(Arc::new(tokens)),
        })
    }

    /// The tokens of `path`, and a task that reads it again when it changes. A file
    /// that cannot be read or is invalid afterwards admits nobody until it is mended
    /// (a revocation never fails open); the log says why.
    pub fn watch_file(path: &Path) -> Result<Arc<Self>, TokenFileError> {
        let table = Self::fixed(Tokens::load(path)?);
        let weak = Arc::downgrade(&table);
        let path = path.to_path_buf();
        let mut seen = file_stamp(&path);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RELOAD_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(table) = weak.upgrade() else { return };
                let stamp = file_stamp(&path);
                if stamp == seen {
                    continue;
                }
                seen = stamp;
                match Tokens::load(&path) {
                    Ok(tokens) => {
                        tracing::info!(file = %path.display(), users = tokens.len(), "token file read again");
                        table.replace(tokens);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the token file changed and is unusable: no token is accepted until it is mended");
                        table.replace(Tokens::default());
                    }
                }
            }
        });
        Ok(table)
    }

    fn replace(&self, tokens: Tokens) {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        *current = Arc::new(tokens);
    }

    /// Who holds `token` now, if anyone.
    pub fn caller(&self, token: &str) -> Option<Caller> {
        let current = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        current.caller(token)
    }
}

/// What tells that a file changed: its inode, size and modification time (a Secret
/// volume's update swaps a symbolic link, which changes the inode).
pub fn file_stamp(path: &Path) -> Option<(u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
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
        .and_then(|(_, value)| pai_api::path::decode(value))
        .filter(|t| !t.is_empty())
}

/// The `Set-Cookie` value keeping `token` for the pages (percent-encoded: a cookie value
/// may hold no `;`, `,`, space or quote, and a token may); `None` removes it.
/// Over TLS the cookie is also `Secure`: a browser never sends it over plain HTTP.
pub fn session_cookie(token: Option<&str>, tls: bool) -> String {
    let secure = if tls { "; Secure" } else { "" };
    match token {
        Some(token) => format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age=2592000{secure}",
            pai_api::path::segment(token)
        ),
        None => format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    }
}

/// The caller of a page: the bearer token or the sign-in cookie; `None` when the
/// request carries no token the server knows.
pub fn page_caller(access: &Access, headers: &axum::http::HeaderMap) -> Option<Caller> {
    let token = bearer(headers)
        .map(str::to_string)
        .or_else(|| token_from_cookies(headers));
    access.caller(token.as_deref())
}

/// The bearer token of a request's `Authorization` header.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
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
/// With where this server's tokens are (the sign-in page's words), said in each 401.
pub async fn authenticate(
    State((access, hint)): State<(Access, Arc<str>)>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = bearer(request.headers());
    let Some(caller) = access.caller(presented) else {
        let refused = if presented.is_some() {
            "the bearer token given is not one of this server's"
        } else {
            "a valid bearer token is required (Authorization: Bearer <token>)"
        };
        return ApiError::unauthorized(format!("{refused}. {hint}")).into_response();
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
            let set = session_cookie(Some(token), false);
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
        assert!(session_cookie(None, false).contains("Max-Age=0"));
        assert!(session_cookie(Some("t"), true).ends_with("; Secure"));
        assert!(!session_cookie(Some("t"), false).contains("Secure"));
    }

    #[test]
    fn a_token_is_found_only_by_its_exact_value() {
        let alice = Caller {
            user: "alice".to_string(),
            admin: false,
            groups: Vec::new(),
        };
        let tokens = Tokens::single("s3cret", alice.clone());
        assert_eq!(tokens.caller("s3cret"), Some(alice));
        for other in ["", "s3cre", "s3cret ", "S3CRET", "s3crett"] {
            assert_eq!(tokens.caller(other), None, "{other:?}");
        }
        assert_eq!(from_hex(&hash("x")), Some(digest("x")));
        assert_eq!(from_hex("zz"), None);
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
