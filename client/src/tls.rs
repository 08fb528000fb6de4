//! The client's trust: the system's roots, and `--ca-cert`'s certificates. The PEM
//! reading here is also how the server reads its certificate chain.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path} holds no certificate (PEM, BEGIN CERTIFICATE)")]
    NoCertificate { path: String },
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Config(String),
}

/// rustls with ring, as kube links it.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
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
