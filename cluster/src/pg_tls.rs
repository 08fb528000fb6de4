//! TLS to the job history's PostgreSQL, as libpq's connection parameters say it, so that
//! a connection string written for `psql` works here unchanged:
//!
//! | `sslmode`     | TLS                    | the database's certificate                    |
//! |---------------|------------------------|-----------------------------------------------|
//! | `disable`     | never                  | -                                             |
//! | `prefer`      | if the database offers | not checked (as libpq)                        |
//! | `require`     | always                 | not checked; with `sslrootcert`, as verify-ca |
//! | `verify-ca`   | always                 | signed by a trusted CA                        |
//! | `verify-full` | always                 | signed by a trusted CA, for the host named    |
//!
//! `prefer` is the default, as libpq's. The trusted CAs are `sslrootcert`'s (a PEM file),
//! or the platform's (`sslrootcert=system`, or none given: libpq's `~/.postgresql/` is not
//! read, a server has no home of its own). `sslcert` and `sslkey` give a client
//! certificate. TLS is rustls with ring, as the rest of the server's. A connection where
//! `require` or stronger was asked never goes on without TLS.
//!
//! tokio-postgres reads every other parameter; these four are taken out of the string
//! first (it knows only `disable`, `prefer` and `require`, and no certificate files).

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What libpq's `sslmode` asks of the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SslMode {
    Disable,
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, PgTlsError> {
        Ok(match value {
            "disable" => Self::Disable,
            // libpq's `allow` tries without TLS first: here, as `prefer`'s weaker twin,
            // it is refused rather than taken for something else.
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(PgTlsError::Parameter(format!(
                    "sslmode={other} is not one of disable, prefer, require, verify-ca, verify-full"
                )));
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection without TLS is refused.
    pub fn requires_tls(self) -> bool {
        matches!(self, Self::Require | Self::VerifyCa | Self::VerifyFull)
    }
}

/// Why the TLS parameters cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PgTlsError {
    #[error("{0}")]
    Parameter(String),
    #[error("{parameter}={path}: {message}")]
    File {
        parameter: &'static str,
        path: String,
        message: String,
    },
}

/// The TLS parameters of a connection string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsParameters {
    pub mode: SslMode,
    /// `sslrootcert`: a PEM file, or `system`.
    pub root_cert: Option<String>,
    /// `sslcert` and `sslkey`.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

impl TlsParameters {
    /// What is checked of the database's certificate, in words for messages.
    pub fn checks(&self) -> String {
        let roots = match self.root_cert.as_deref() {
            None | Some("system") => "this machine's trusted CAs".to_string(),
            Some(path) => format!("the CA in {path}"),
        };
        match self.effective_mode() {
            SslMode::Disable => "no TLS (sslmode=disable)".to_string(),
            SslMode::Prefer => {
                "TLS where the database offers it, its certificate not checked (sslmode=prefer)"
                    .to_string()
            }
            SslMode::Require => "TLS, its certificate not checked (sslmode=require)".to_string(),
            SslMode::VerifyCa => format!(
                "TLS, its certificate signed by {roots} (sslmode={})",
                self.mode.as_str()
            ),
            SslMode::VerifyFull => format!(
                "TLS, its certificate signed by {roots} and for the host connected to (sslmode=verify-full)"
            ),
        }
    }

    /// The mode as it acts: `require` with a root certificate given verifies its CA, as
    /// libpq's does.
    fn effective_mode(&self) -> SslMode {
        match (self.mode, &self.root_cert) {
            (SslMode::Require, Some(_)) => SslMode::VerifyCa,
            (mode, _) => mode,
        }
    }

    /// The mode tokio-postgres negotiates with.
    pub fn negotiation(&self) -> tokio_postgres::config::SslMode {
        match self.mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        }
    }

    /// The connector that does what they ask.
    pub fn connector(&self) -> Result<MakeRustls, PgTlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let lenient = |ca| -> Arc<dyn ServerCertVerifier> {
            Arc::new(Lenient {
                provider: provider.clone(),
                ca,
            })
        };
        let verifier: Arc<dyn ServerCertVerifier> = match self.effective_mode() {
            SslMode::Disable | SslMode::Prefer | SslMode::Require => lenient(None),
            mode => {
                let roots = Arc::new(self.roots()?);
                let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                    roots,
                    provider.clone(),
                )
                .build()
                .map_err(|e| PgTlsError::Parameter(format!("sslrootcert: {e}")))?;
                match mode {
                    SslMode::VerifyFull => webpki,
                    _ => lenient(Some(webpki)),
                }
            }
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PgTlsError::Parameter(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let chain = certificates("sslcert", cert)?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| PgTlsError::File {
                    parameter: "sslkey",
                    path: key.display().to_string(),
                    message: e.to_string(),
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| PgTlsError::Parameter(format!("sslcert and sslkey: {e}")))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(PgTlsError::Parameter(
                    "sslcert and sslkey go together: a client certificate needs its key"
                        .to_string(),
                ));
            }
        };
        Ok(MakeRustls(Arc::new(config)))
    }

    fn roots(&self) -> Result<rustls::RootCertStore, PgTlsError> {
        let mut roots = rustls::RootCertStore::empty();
        match self.root_cert.as_deref() {
            None | Some("system") => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    // A root rustls cannot read is one it would never trust anyway.
                    let _ = roots.add(cert);
                }
                if roots.is_empty() {
                    return Err(PgTlsError::Parameter(format!(
                        "sslmode={} checks the database's certificate, and this machine has no trusted CAs: give the CA that signed it as sslrootcert=PATH",
                        self.mode.as_str()
                    )));
                }
            }
            Some(path) => {
                for cert in certificates("sslrootcert", Path::new(path))? {
                    roots.add(cert).map_err(|e| PgTlsError::File {
                        parameter: "sslrootcert",
                        path: path.to_string(),
                        message: e.to_string(),
                    })?;
                }
            }
        }
        Ok(roots)
    }
}

fn certificates(
    parameter: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, PgTlsError> {
    let error = |message: String| PgTlsError::File {
        parameter,
        path: path.display().to_string(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(e.to_string()))?;
    if certs.is_empty() {
        return Err(error(
            "holds no certificate (PEM, BEGIN CERTIFICATE)".to_string(),
        ));
    }
    Ok(certs)
}

/// The TLS parameters taken out of `connection` (a libpq key/value string or a URL), and
/// the rest of it, for tokio-postgres.
pub fn split(connection: &str) -> Result<(TlsParameters, String), PgTlsError> {
    let trimmed = connection.trim_start();
    if trimmed.starts_with("postgresql://") || trimmed.starts_with("postgres://") {
        split_url(trimmed)
    } else {
        split_key_values(connection)
    }
}

/// Takes one TLS parameter; false when `key` is none of them.
fn take(parameters: &mut TlsParameters, key: &str, value: String) -> Result<bool, PgTlsError> {
    match key {
        "sslmode" => parameters.mode = SslMode::parse(&value)?,
        "sslrootcert" => parameters.root_cert = Some(value),
        "sslcert" => parameters.client_cert = Some(PathBuf::from(value)),
        "sslkey" => parameters.client_key = Some(PathBuf::from(value)),
        _ => return Ok(false),
    }
    Ok(true)
}

fn split_url(url: &str) -> Result<(TlsParameters, String), PgTlsError> {
    let mut parameters = TlsParameters::default();
    let Some((base, query)) = url.split_once('?') else {
        return Ok((parameters, url.to_string()));
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = percent_decoded(value).ok_or_else(|| {
            PgTlsError::Parameter(format!("{key}: {value:?} is not percent-encoded text"))
        })?;
        if !take(&mut parameters, key, decoded)? {
            kept.push(pair);
        }
    }
    let rest = match kept.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Ok((parameters, rest))
}

fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// libpq's `key = value` form: values quoted with `'`, `\` escaping the next character.
fn split_key_values(text: &str) -> Result<(TlsParameters, String), PgTlsError> {
    let mut parameters = TlsParameters::default();
    let mut kept = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            // Left to tokio-postgres to say what is wrong with it.
            return Ok((parameters, text.to_string()));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => return Ok((parameters, text.to_string())),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                match c {
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        }
        if !take(&mut parameters, &key, value.clone())? {
            let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
            kept.push(format!("{key}='{quoted}'"));
        }
    }
    Ok((parameters, kept.join(" ")))
}

/// Where `error` (a failed connection) is the database refusing this server as its
/// parameters say it, why, and what to change; `None` where it could not be reached.
pub fn refusal(error: &tokio_postgres::Error, tls: &TlsParameters) -> Option<String> {
    let said = causes(error);
    let checks = tls.checks();
    if said.contains("server does not support TLS") {
        return Some(format!(
            "it does not offer TLS, and this server asks for {checks}: turn TLS on in the database (`ssl = on`), or, on a network you trust, connect with sslmode=prefer ({said})"
        ));
    }
    if let Some(tls_error) = rustls_error(error) {
        use rustls::AlertDescription;
        let way_out = match tls_error {
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => "its certificate is not for the host connected to: connect by a name the certificate holds, or check its CA alone with sslmode=verify-ca".to_string(),
            rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer | CertificateError::BadSignature,
            ) => format!(
                "its certificate is not signed by a CA this server trusts ({checks}): give the CA that signed it as sslrootcert=PATH"
            ),
            rustls::Error::InvalidCertificate(other) => {
                format!("its certificate does not verify ({other:?}; {checks})")
            }
            rustls::Error::AlertReceived(
                AlertDescription::CertificateRequired | AlertDescription::HandshakeFailure,
            ) if tls.client_cert.is_none() => {
                "it asks for a client certificate: give sslcert=PATH and sslkey=PATH".to_string()
            }
            rustls::Error::AlertReceived(
                AlertDescription::UnknownCA
                | AlertDescription::BadCertificate
                | AlertDescription::CertificateUnknown,
            ) => "it does not accept this server's client certificate (sslcert): it must be signed by the CA the database trusts (ssl_ca_file)".to_string(),
            other => format!("the TLS handshake failed: {other} ({checks})"),
        };
        return Some(format!("{way_out} ({said})"));
    }
    let db = error.as_db_error()?;
    let message = db.message();
    let code = db.code().code();
    if code == "28000" && message.contains("no encryption") {
        return Some(format!(
            "it takes this user from this host only over TLS, and this server asks for {checks}: connect with sslmode=require, or verify-full with sslrootcert ({message})"
        ));
    }
    if code == "28000" && message.contains("certificate") {
        return Some(match tls.client_cert {
            None => format!(
                "it asks this user for a client certificate: give sslcert=PATH and sslkey=PATH ({message})"
            ),
            Some(_) => format!(
                "it does not accept the client certificate (sslcert): it must be signed by the CA the database trusts (ssl_ca_file), its common name the user connecting ({message})"
            ),
        });
    }
    // invalid_authorization_specification, invalid_password
    matches!(code, "28000" | "28P01").then(|| message.to_string())
}

/// The rustls error under `error`, if TLS is what failed.
fn rustls_error(error: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(tls) = cause
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        source = cause.source();
    }
    None
}

/// An error and its causes, outermost first.
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The database's certificate checked only as far as the mode asks: not at all
/// (`prefer`, `require`: encrypted, not authenticated, as libpq's), or its CA and not its
/// host name (`verify-ca`). The handshake's signatures are always checked.
#[derive(Debug)]
struct Lenient {
    provider: Arc<rustls::crypto::CryptoProvider>,
    /// `verify-ca`'s check of the CA; `None`: no check.
    ca: Option<Arc<rustls::client::WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(ca) = &self.ca else {
            return Ok(ServerCertVerified::assertion());
        };
        match ca.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// tokio-postgres' maker of TLS connections, with rustls.
#[derive(Clone)]
pub struct MakeRustls(Arc<rustls::ClientConfig>);

impl<S> tokio_postgres::tls::MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, io::Error> {
        // A Unix socket has no name (and no TLS: the database says so).
        let name = ServerName::try_from(domain.to_string()).ok();
        Ok(RustlsConnect {
            config: self.0.clone(),
            name,
        })
    }
}

/// One TLS connection to be made.
pub struct RustlsConnect {
    config: Arc<rustls::ClientConfig>,
    name: Option<ServerName<'static>>,
}

impl<S> tokio_postgres::tls::TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let name = self.name.ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "no host name to check")
            })?;
            tokio_rustls::TlsConnector::from(self.config)
                .connect(name, stream)
                .await
                .map(RustlsStream)
        })
    }
}

/// A TLS connection to the database.
pub struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> tokio_postgres::tls::ChannelBinding {
        tokio_postgres::tls::ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_parameters_are_taken_out_of_either_form() {
        let (tls, rest) = split(
            "host=db.example port=5432 sslmode=verify-full sslrootcert='/etc/pg ca/ca.pem' user=rest_lite password='it\\'s'",
        )
        .unwrap();
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert.as_deref(), Some("/etc/pg ca/ca.pem"));
        assert_eq!(
            rest,
            "host='db.example' port='5432' user='rest_lite' password='it\\'s'"
        );
        let rest: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(rest.get_password(), Some(&b"it's"[..]));

        let (tls, rest) = split(
            "postgresql://rest_lite:pw@db.example:5432/history?sslmode=verify-ca&sslrootcert=%2Fetc%2Fca.pem&connect_timeout=5&sslcert=/c.pem&sslkey=/k.pem",
        )
        .unwrap();
        assert_eq!(tls.mode, SslMode::VerifyCa);
        assert_eq!(tls.root_cert.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(tls.client_cert.as_deref(), Some(Path::new("/c.pem")));
        assert_eq!(tls.client_key.as_deref(), Some(Path::new("/k.pem")));
        assert_eq!(
            rest,
            "postgresql://rest_lite:pw@db.example:5432/history?connect_timeout=5"
        );
        // libpq's default.
        let (tls, _) = split("host=/run/postgresql").unwrap();
        assert_eq!(tls.mode, SslMode::Prefer);
    }

    #[test]
    fn a_mode_libpq_does_not_know_is_refused_by_name() {
        let error = split("host=db sslmode=verify").unwrap_err().to_string();
        assert!(error.contains("sslmode=verify is not one of"), "{error}");
        let error = split("postgres://db/x?sslmode=allow")
            .unwrap_err()
            .to_string();
        assert!(error.contains("sslmode=allow"), "{error}");
    }

    #[test]
    fn require_with_a_root_certificate_checks_the_ca_as_libpq_does() {
        let (tls, _) = split("host=db sslmode=require sslrootcert=/ca.pem").unwrap();
        assert_eq!(tls.effective_mode(), SslMode::VerifyCa);
        assert!(tls.checks().contains("signed by the CA in /ca.pem"));
        let (tls, _) = split("host=db sslcert=/c.pem").unwrap();
        let error = tls.connector().err().expect("refused").to_string();
        assert!(error.contains("sslcert and sslkey go together"), "{error}");
    }
}
