//! Requests from browsers are what they claim to be.
//!
//! - **DNS rebinding.** A page of `attacker.example` whose name is made to resolve to
//!   127.0.0.1 is same-origin with this server as far as the browser knows; only the
//!   `Host` header still says `attacker.example`. A request is served only when its
//!   `Host` is an IP address (no name, nothing to rebind), `localhost` (or a name under
//!   it, which browsers resolve to loopback themselves), or a name the operator listed
//!   (`--public-url`).
//! - **Cross-site requests.** A page on any site may POST to any URL without asking
//!   (a "simple" request needs no CORS preflight). Browsers say where such a request
//!   comes from: a state-changing request (anything but GET, HEAD, OPTIONS) whose
//!   `Sec-Fetch-Site` says another site, or (from a browser too old to send that) whose
//!   `Origin` is not this server's own, is refused. Programs (curl, the CLI) send neither
//!   header and are not affected.
//!
//! Both refusals are 403 with the API's JSON error body, before anything else runs.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// The host names a server answers to besides IP addresses and `localhost`.
#[derive(Clone, Debug, Default)]
pub struct Hosts {
    /// Lower-case, without a trailing dot.
    names: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("public URL {url:?}: {why}")]
pub struct BadPublicUrl {
    url: String,
    why: &'static str,
}

impl Hosts {
    /// From the operator's public URLs (`https://jobs.example.com`, `http://rest-lite:9186`).
    pub fn from_urls<S: AsRef<str>>(urls: &[S]) -> Result<Self, BadPublicUrl> {
        let mut names = Vec::new();
        for url in urls {
            let url = url.as_ref();
            let bad = |why| BadPublicUrl {
                url: url.to_string(),
                why,
            };
            let (scheme, rest) = url
                .split_once("://")
                .ok_or_else(|| bad("not scheme://host[:port]"))?;
            if !matches!(scheme, "http" | "https") {
                return Err(bad("the scheme is not http or https"));
            }
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            let (host, _) = split_host(authority).ok_or_else(|| bad("no host"))?;
            names.push(host);
        }
        Ok(Self { names })
    }

    /// Whether a request with this `Host` value is for this server.
    pub fn allows(&self, host_header: &str) -> bool {
        let Some((host, _)) = split_host(host_header) else {
            return false;
        };
        host.parse::<IpAddr>().is_ok()
            || host == "localhost"
            || host.ends_with(".localhost")
            || self.is_listed(&host)
    }

    fn is_listed(&self, host: &str) -> bool {
        self.names.iter().any(|n| n == host)
    }
}

/// `host[:port]` (IPv6 in brackets) → the host, lower-case without brackets or a trailing
/// dot, and the port; `None` when malformed.
fn split_host(authority: &str) -> Option<(String, Option<u16>)> {
    let authority = authority.trim();
    if authority.is_empty() || authority.contains(['@', ' ', '/']) {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse().ok()?),
        };
        (inside.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), Some(port.parse().ok()?)),
            None => (authority.to_string(), None),
        }
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty()).then_some((host, port))
}

/// `scheme://host[:port]` of an `Origin` → host and port (the scheme's default when
/// none is written).
fn origin_parts(origin: &str) -> Option<(String, u16)> {
    let (scheme, authority) = origin.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let (host, port) = split_host(authority)?;
    Some((host, port.unwrap_or(default)))
}

fn text<'a>(headers: &'a HeaderMap, name: &header::HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Why a request is refused, if it is.
pub fn refusal(hosts: &Hosts, tls: bool, method: &Method, headers: &HeaderMap) -> Option<ApiError> {
    let host = text(headers, &header::HOST).unwrap_or_default();
    if !hosts.allows(host) {
        return Some(ApiError::forbidden_host(host));
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    match text(headers, &header::HeaderName::from_static("sec-fetch-site")) {
        // The browser itself says the page is ours (a page cannot set this header), or
        // that no page sent it; its `Origin` may then be "null" (a form posted under
        // a strict referrer policy), which says nothing more.
        Some("same-origin" | "none") => return None,
        Some(site) => {
            return Some(ApiError::forbidden_origin(&format!(
                "Sec-Fetch-Site: {site}"
            )));
        }
        None => {}
    }
    let origin = text(headers, &header::ORIGIN)?;
    let (own_host, own_port) = split_host(host)?;
    let own_port = own_port.unwrap_or(if tls { 443 } else { 80 });
    let same = match origin_parts(origin) {
        // This server as the request names it, or a public name of it (behind a proxy
        // that rewrites `Host`).
        Some((o_host, o_port)) => {
            (o_host == own_host && o_port == own_port) || hosts.is_listed(&o_host)
        }
        None => false,
    };
    (!same).then(|| ApiError::forbidden_origin(origin))
}

/// What the guard needs to know: the names this server answers to, and whether it
/// speaks TLS.
#[derive(Clone)]
pub struct Site {
    pub hosts: Arc<Hosts>,
    pub tls: bool,
}

/// Middleware: refuses what [`refusal`] refuses.
pub async fn check(State(site): State<Site>, request: Request, next: Next) -> Response {
    match refusal(&site.hosts, site.tls, request.method(), request.headers()) {
        Some(error) => {
            tracing::warn!(method = %request.method(), path = %request.uri().path(), reason = %error.message, "refused a request from a browser");
            error.into_response()
        }
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("ascii"));
        }
        h
    }

    #[test]
    fn hosts_by_address_localhost_or_listed_name() {
        let hosts = Hosts::from_urls(&["https://Jobs.Example.com/ui", "http://rest-lite:9186"])
            .expect("urls");
        for ok in [
            "127.0.0.1:9186",
            "127.0.0.1",
            "[::1]:9186",
            "10.1.2.3:80",
            "localhost:9186",
            "LOCALHOST.",
            "app.localhost:1",
            "jobs.example.com",
            "jobs.example.com.:443",
            "rest-lite",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for refused in [
            "",
            "attacker.example:9186",
            "127.0.0.1.attacker.example",
            "localhost.attacker.example",
            "jobs.example.com.evil",
            "user@127.0.0.1",
            "[::1",
            "127.0.0.1:notaport",
        ] {
            assert!(!hosts.allows(refused), "{refused}");
        }
        assert!(Hosts::from_urls(&["ftp://x"]).is_err());
        assert!(Hosts::from_urls(&["jobs.example.com"]).is_err());
    }

    #[test]
    fn state_changes_only_from_our_own_origin() {
        let hosts = Hosts::default();
        let post = Method::POST;
        let host = ("host", "127.0.0.1:9186");
        assert!(refusal(&hosts, false, &post, &headers(&[host])).is_none());
        assert!(
            refusal(
                &hosts,
                false,
                &post,
                &headers(&[host, ("origin", "http://127.0.0.1:9186")])
            )
            .is_none()
        );
        assert!(
            refusal(
                &hosts,
                false,
                &post,
                &headers(&[host, ("sec-fetch-site", "same-origin")])
            )
            .is_none()
        );
        for origin in [
            "https://attacker.example",
            "http://127.0.0.1:9187",
            "null",
            "http://localhost:9186",
        ] {
            let refused = refusal(&hosts, false, &post, &headers(&[host, ("origin", origin)]));
            assert_eq!(refused.map(|e| e.status.as_u16()), Some(403), "{origin}");
        }
        // Chromium posts a form under `Referrer-Policy: no-referrer` with `Origin: null`;
        // its Sec-Fetch-Site still says whose page it was.
        assert!(
            refusal(
                &hosts,
                false,
                &post,
                &headers(&[host, ("sec-fetch-site", "same-origin"), ("origin", "null")])
            )
            .is_none()
        );
        let same_site = headers(&[
            host,
            ("sec-fetch-site", "same-site"),
            ("origin", "http://127.0.0.1:9187"),
        ]);
        assert!(refusal(&hosts, false, &post, &same_site).is_some());
        let cross = headers(&[host, ("sec-fetch-site", "cross-site")]);
        assert!(refusal(&hosts, false, &Method::DELETE, &cross).is_some());
        // Reading is not a state change; a foreign page cannot read the answer anyway.
        assert!(refusal(&hosts, false, &Method::GET, &cross).is_none());
        // Default ports.
        let plain = headers(&[("host", "localhost"), ("origin", "http://localhost")]);
        assert!(refusal(&hosts, false, &post, &plain).is_none());
        let tls = headers(&[("host", "localhost"), ("origin", "https://localhost:443")]);
        assert!(refusal(&hosts, true, &post, &tls).is_none());
    }
}
