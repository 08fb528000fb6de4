//! HTTPS: `rest-lite serve --tls-cert CERT --tls-key KEY` (PEM files, the certificate
//! chain first) and the client's trust (the system's roots, or `--ca-cert`). rustls with
//! ring, the same TLS library kube links already.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path} holds no certificate (PEM, BEGIN CERTIFICATE)")]
    NoCertificate { path: String },
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Config(String),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate of a PEM file.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read = |e: rustls_pki_types::pem::Error| TlsError::Read {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.display().to_string(),
        });
    }
    Ok(certs)
}

/// The server's TLS configuration from its certificate chain and private key.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certificates(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Read {
        path: key.display().to_string(),
        message: e.to_string(),
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The client's TLS configuration: the system's roots, and `ca_cert`'s certificates
/// when given.
pub fn client_config(ca_cert: Option<&Path>) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        // A system root rustls cannot use is one it would never trust anyway.
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_cert {
        for cert in certificates(path)? {
            roots
                .add(cert)
                .map_err(|e| TlsError::Config(e.to_string()))?;
        }
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Serves `app` over TLS on `listener` until `shutdown` completes; connections in
/// flight are left to the caller's grace period.
pub async fn serve(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, say: wait a moment rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .with_upgrades();
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
