//! An HTTP(S) client of the rest-lite jobs API, typed with the API's view types
//! ([`pai_api`]): what the command line uses, and what other programs can.

pub mod tls;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use http_body_util::{BodyExt, BodyStream, Full};
use hyper::{Method, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use pai_api::routes;
use pai_contract::backoff::{self, Backoff};
use serde::de::DeserializeOwned;

use pai_api::jobs::{Execution, JobSummary, Message};
use pai_api::path::segment as encode;
use pai_api::ssh::SshInfo;
use pai_api::status::JobView;
use pai_contract::SpecFormat;
pub use pai_contract::log_lines::Source;
pub use pai_contract::ordered_log::Stream;

/// Which lines of a task's log to ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lines {
    /// By whose they are (the user command's, the runtime's, all).
    Source(Source),
    /// One stream of the user command's output alone.
    Stream(Stream),
}

impl Lines {
    fn query(self) -> String {
        match self {
            Lines::Source(source) => format!("source={}", source.as_str()),
            Lines::Stream(stream) => format!("stream={}", stream.as_str()),
        }
    }
}

impl From<Source> for Lines {
    fn from(source: Source) -> Self {
        Lines::Source(source)
    }
}

impl Lines {
    /// These lines, each begun with the time it was written and a space
    /// (`timestamps=true`).
    pub fn stamped(self) -> Asked {
        Asked {
            lines: self,
            timestamps: true,
        }
    }
}

/// What a log request asks for: which lines, and whether each begins with its time.
#[derive(Clone, Copy, Debug)]
pub struct Asked {
    pub lines: Lines,
    pub timestamps: bool,
}

impl Asked {
    fn query(self) -> String {
        match self.timestamps {
            true => format!("{}&timestamps=true", self.lines.query()),
            false => self.lines.query(),
        }
    }
}

impl From<Lines> for Asked {
    fn from(lines: Lines) -> Self {
        Asked {
            lines,
            timestamps: false,
        }
    }
}

impl From<Source> for Asked {
    fn from(source: Source) -> Self {
        Lines::Source(source).into()
    }
}

/// The time a line of a log asked with timestamps begins with, and the line after it;
/// `None` where it begins with no time.
pub fn stamp_of(line: &[u8]) -> Option<(jiff::Timestamp, &[u8])> {
    let space = line.iter().position(|&b| b == b' ')?;
    let time = std::str::from_utf8(&line[..space]).ok()?.parse().ok()?;
    Some((time, &line[space + 1..]))
}

pub use pai_api::error::{ErrorBody, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{code} ({status}): {message}")]
    Api {
        status: u16,
        code: ErrorCode,
        message: String,
        /// Whether this request carried a token (a 401 then means a wrong one).
        token_sent: bool,
    },
    #[error("cannot reach rest-lite at {url}: {message}")]
    Transport { url: String, message: String },
    #[error("the server's answer is not what the API says: {0}")]
    Answer(String),
    #[error("the server's answer was cut off: {0}")]
    Cut(String),
    #[error("TLS: {0}")]
    Tls(String),
}

impl ClientError {
    /// An error that asking again may mend: the server unreachable or cut off, or
    /// answering 502/503/504 (restarting, or its cluster's API server is).
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Transport { .. } | ClientError::Cut(_) => true,
            ClientError::Api { status, .. } => matches!(status, 502..=504),
            ClientError::Answer(_) | ClientError::Tls(_) => false,
        }
    }
}

/// How many times in a row a watch is opened again after transient failures before it
/// gives up: with the client's back-off ([`backoff::CLIENT`]), four minutes or so.
const WATCH_RETRIES: u32 = 40;

/// A client of one server, acting with one token (or none).
#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: HttpClient<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Client {
    /// Whether it sends a bearer token.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// `base`: `http://host:port`. For `https://`, see [`Client::with_tls`].
    pub fn new(base: &str, token: Option<String>) -> Self {
        // No roots: a plain HTTP client never needs one.
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        });
        match tls {
            Ok(tls) => Self::with_config(base, token, tls),
            // ring's defaults always build; this is unreachable in practice.
            Err(e) => unreachable!("ring's default TLS versions: {e}"),
        }
    }

    /// `base`: `http://…` or `https://…`, trusting the system's roots and `ca_cert`.
    pub fn with_tls(
        base: &str,
        token: Option<String>,
        ca_cert: Option<&std::path::Path>,
    ) -> Result<Self, ClientError> {
        if !base.starts_with("https://") && ca_cert.is_none() {
            return Ok(Self::new(base, token));
        }
        let tls =
            crate::tls::client_config(ca_cert).map_err(|e| ClientError::Tls(e.to_string()))?;
        Ok(Self::with_config(base, token, tls))
    }

    fn with_config(base: &str, token: Option<String>, tls: rustls::ClientConfig) -> Self {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Self {
            base: base.trim_end_matches('/').to_string(),
            token,
            http: HttpClient::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// The server's URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn job_path(user: &str, job: &str) -> String {
        routes::JOB.with(&[user, job])
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut request = Request::builder().method(method).uri(&url);
        if let Some(content_type) = content_type {
            request = request.header(hyper::header::CONTENT_TYPE, content_type);
        }
        if let Some(token) = &self.token {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| ClientError::Transport {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|e| ClientError::Transport {
                url: self.base.clone(),
                message: causes(&e),
            })?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        Err(api_error(status, &body, self.token.is_some()))
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<T, ClientError> {
        let bytes = self.body(method, path, content_type, body).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Answer(e.to_string()))
    }

    /// The whole body of a successful answer.
    async fn body(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Bytes, ClientError> {
        let response = self.send(method, path, content_type, body).await?;
        Ok(response
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::Answer(e.to_string()))?
            .to_bytes())
    }

    /// Whether the server answers `/healthz` with success.
    pub async fn healthz(&self) -> Result<(), ClientError> {
        let response = self
            .send(Method::GET, routes::HEALTHZ.template(), None, Bytes::new())
            .await?;
        response
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::Answer(e.to_string()))?;
        Ok(())
    }

    /// Submits a spec, sent as its media type; returns the server's message.
    pub async fn submit(
        &self,
        user: &str,
        spec: &str,
        format: SpecFormat,
    ) -> Result<Message, ClientError> {
        self.json(
            Method::POST,
            &routes::USER_JOBS.with(&[user]),
            Some(format.media_type()),
            Bytes::from(spec.to_string()),
        )
        .await
    }

    /// The job's status.
    pub async fn job(&self, user: &str, job: &str) -> Result<JobView, ClientError> {
        self.json(Method::GET, &Self::job_path(user, job), None, Bytes::new())
            .await
    }

    /// The job's status now and after every change, until a final state or its deletion.
    /// A watch the server ends before that (it ends every watch after a while) is opened
    /// again; the view it starts with is left out when it is the last one already given.
    pub async fn watch(
        &self,
        user: &str,
        job: &str,
    ) -> Result<BoxStream<'static, Result<JobView, ClientError>>, ClientError> {
        let first = self.watch_once(user, job).await?;
        let this = self.clone();
        let (user, job) = (user.to_string(), job.to_string());
        // (the open watch, the last line given, done, failures in a row, the back-off)
        let views = futures::stream::unfold(
            (
                Some(first),
                None::<Vec<u8>>,
                false,
                0u32,
                Backoff::new(backoff::CLIENT),
            ),
            move |(mut open, mut last, done, mut failures, mut delays)| {
                let (this, user, job) = (this.clone(), user.clone(), job.clone());
                async move {
                    if done {
                        return None;
                    }
                    loop {
                        let lines = match open.as_mut() {
                            Some(lines) => lines,
                            None => match this.watch_once(&user, &job).await {
                                Ok(lines) => open.insert(lines),
                                // Deleted meanwhile: the stream ends as it would have.
                                Err(ClientError::Api { status: 404, .. }) => return None,
                                Err(e) if e.is_transient() && failures < WATCH_RETRIES => {
                                    failures += 1;
                                    tokio::time::sleep(delays.next_delay()).await;
                                    continue;
                                }
                                Err(e) => {
                                    return Some((Err(e), (None, last, true, failures, delays)));
                                }
                            },
                        };
                        match lines.next().await {
                            // The same view again (a server that watched again after
                            // the cluster's API server restarted): said once.
                            Some(Ok(line)) if last.as_ref() == Some(&line) => continue,
                            Some(Ok(line)) => {
                                failures = 0;
                                delays.reset();
                                let view: Result<JobView, _> = serde_json::from_slice(&line)
                                    .map_err(|e| ClientError::Answer(e.to_string()));
                                let final_state =
                                    view.as_ref().is_ok_and(|v| v.job_status.state.is_final());
                                last = Some(line);
                                return Some((view, (open, last, final_state, failures, delays)));
                            }
                            // Cut mid-stream (the server restarted, a proxy dropped it):
                            // watch again; the view resumes from the job as it is now.
                            Some(Err(e)) if e.is_transient() && failures < WATCH_RETRIES => {
                                failures += 1;
                                open = None;
                                tokio::time::sleep(delays.next_delay()).await;
                            }
                            Some(Err(e)) => {
                                return Some((Err(e), (None, last, true, failures, delays)));
                            }
                            // The server ended the watch: open it again.
                            None => open = None,
                        }
                    }
                }
            },
        );
        Ok(views.boxed())
    }

    /// One watch of the job, as the server streams it: one JSON line per view.
    async fn watch_once(
        &self,
        user: &str,
        job: &str,
    ) -> Result<BoxStream<'static, Result<Vec<u8>, ClientError>>, ClientError> {
        let path = format!("{}?watch=true", Self::job_path(user, job));
        let response = self.send(Method::GET, &path, None, Bytes::new()).await?;
        Ok(lines(chunks(response)))
    }

    /// The jobs of `user`, or every job the caller may see.
    pub async fn jobs(&self, user: Option<&str>) -> Result<Vec<JobSummary>, ClientError> {
        let path = match user {
            Some(user) => routes::USER_JOBS.with(&[user]),
            None => routes::JOBS.with(&[]),
        };
        self.json(Method::GET, &path, None, Bytes::new()).await
    }

    /// Whom this client's token stands for.
    pub async fn whoami(&self) -> Result<pai_api::jobs::WhoAmI, ClientError> {
        self.json(Method::GET, routes::WHOAMI.template(), None, Bytes::new())
            .await
    }

    /// Where each task's sshd listens.
    pub async fn ssh(&self, user: &str, job: &str) -> Result<SshInfo, ClientError> {
        self.json(
            Method::GET,
            &routes::JOB_SSH.with(&[user, job]),
            None,
            Bytes::new(),
        )
        .await
    }

    /// The private half of the job's key pair (OpenSSH format).
    pub async fn ssh_key(&self, user: &str, job: &str) -> Result<String, ClientError> {
        let path = routes::JOB_SSH_KEY.with(&[user, job]);
        let bytes = self.body(Method::GET, &path, None, Bytes::new()).await?;
        String::from_utf8(bytes.to_vec()).map_err(|e| ClientError::Answer(e.to_string()))
    }

    /// Asks the job to stop.
    pub async fn stop(&self, user: &str, job: &str) -> Result<Message, ClientError> {
        self.execution(user, job, Execution::Stop).await
    }

    /// `PUT …/executionType`: STOP, or START (which a completed job refuses).
    pub async fn execution(
        &self,
        user: &str,
        job: &str,
        value: Execution,
    ) -> Result<Message, ClientError> {
        let body = serde_json::to_vec(&serde_json::json!({ "value": value }))
            .map_err(|e| ClientError::Answer(e.to_string()))?;
        self.json(
            Method::PUT,
            &routes::JOB_EXECUTION.with(&[user, job]),
            Some("application/json"),
            Bytes::from(body),
        )
        .await
    }

    /// Deletes the job.
    pub async fn delete(&self, user: &str, job: &str) -> Result<Message, ClientError> {
        self.json(
            Method::DELETE,
            &Self::job_path(user, job),
            None,
            Bytes::new(),
        )
        .await
    }

    /// One task's log, `source`'s lines, chunk by chunk; with `follow`, until the task
    /// ends.
    pub async fn logs(
        &self,
        user: &str,
        job: &str,
        role: &str,
        index: u32,
        follow: bool,
        lines: impl Into<Asked>,
    ) -> Result<Chunks, ClientError> {
        let query = format!("follow={follow}&{}", lines.into().query());
        self.task_log(user, job, role, index, &query).await
    }

    /// One task's whole log in attempt `attempt` of the job (from 0), those `lines`.
    pub async fn attempt_logs(
        &self,
        user: &str,
        job: &str,
        role: &str,
        index: u32,
        attempt: u32,
        lines: impl Into<Asked>,
    ) -> Result<Chunks, ClientError> {
        let query = format!("attempt={attempt}&{}", lines.into().query());
        self.task_log(user, job, role, index, &query).await
    }

    /// `GET …/logs?role=&index=&<query>`, chunk by chunk.
    async fn task_log(
        &self,
        user: &str,
        job: &str,
        role: &str,
        index: u32,
        query: &str,
    ) -> Result<Chunks, ClientError> {
        let path = format!(
            "{}?role={}&index={index}&{query}",
            routes::JOB_LOGS.with(&[user, job]),
            encode(role)
        );
        let response = self.send(Method::GET, &path, None, Bytes::new()).await?;
        Ok(chunks(response))
    }
}

/// An error and its causes, outermost first ("client error (Connect): invalid peer
/// certificate: UnknownIssuer").
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

/// A body chunk by chunk.
pub type Chunks = BoxStream<'static, Result<Bytes, ClientError>>;

/// A response's body, chunk by chunk as it arrives.
fn chunks(response: hyper::Response<hyper::body::Incoming>) -> Chunks {
    BodyStream::new(response.into_body())
        .filter_map(|frame| async move {
            match frame {
                Ok(frame) => frame.into_data().ok().map(Ok),
                Err(e) => Some(Err(ClientError::Cut(e.to_string()))),
            }
        })
        .boxed()
}

/// Chunks cut into lines, without their `\n`; a last line without one comes at the end.
pub fn lines(chunks: Chunks) -> BoxStream<'static, Result<Vec<u8>, ClientError>> {
    // (chunks, the bytes after the last line, the body ended)
    futures::stream::unfold(
        (chunks, Vec::<u8>::new(), false),
        |(mut chunks, mut pending, ended)| async move {
            if ended {
                return None;
            }
            loop {
                if let Some(end) = pending.iter().position(|&b| b == b'\n') {
                    let mut line: Vec<u8> = pending.drain(..=end).collect();
                    line.pop();
                    return Some((Ok(line), (chunks, pending, false)));
                }
                match chunks.next().await {
                    Some(Ok(chunk)) => pending.extend_from_slice(&chunk),
                    Some(Err(e)) => return Some((Err(e), (chunks, pending, true))),
                    None if pending.is_empty() => return None,
                    None => return Some((Ok(pending), (chunks, Vec::new(), true))),
                }
            }
        },
    )
    .boxed()
}

/// The API's error answer: its body as [`ErrorBody`], or, where the body is not one (a
/// proxy's page), `UnknownError` with the body's text.
fn api_error(status: StatusCode, body: &[u8], token_sent: bool) -> ClientError {
    let (code, message) = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(body) => (body.code, body.message),
        Err(_) => (
            ErrorCode::UnknownError,
            String::from_utf8_lossy(body).trim().to_string(),
        ),
    };
    ClientError::Api {
        status: status.as_u16(),
        code,
        message,
        token_sent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn chunks_are_cut_into_lines_across_their_borders() {
        let chunks: Chunks = futures::stream::iter(
            ["ab\nc", "d\n", "\n", "e"].map(|c| Ok(Bytes::from_static(c.as_bytes()))),
        )
        .boxed();
        let got: Vec<Vec<u8>> = lines(chunks).map(|l| l.expect("line")).collect().await;
        assert_eq!(
            got,
            [b"ab".to_vec(), b"cd".to_vec(), b"".to_vec(), b"e".to_vec()]
        );
    }
}
