//! TLS, for sessions and the v1 client, to a server started with
//! `TLS_CERT`/`TLS_KEY` (and mutual TLS with `TLS_CLIENT_CA`), through
//! rustls with the ring provider. Only with the crate's `tls` feature.
//!
//! Guarantees: the server's certificate chain is checked against the CA
//! bundle given, or the system's roots, and its name against the host of
//! the address dialled (or the name given); TLS 1.2 or later.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::Error;

/// How a session or a v1 client speaks TLS: the roots it trusts, an
/// optional client certificate, an optional server name. Made by
/// [`TlsConfig::builder`] or from a rustls configuration of the program's own
/// ([`TlsConfig::from_rustls`]); given to [`crate::SessionBuilder::tls`]
/// and [`crate::Client::with_tls`].
#[derive(Clone)]
pub struct TlsConfig {
    pub(crate) config: Arc<rustls::ClientConfig>,
    server_name: Option<String>,
}

// A configuration is only read once built; what rustls changes behind it
// (its resumption cache) sits behind rustls's own locks. So a `Client` that
// carries one stays usable across a caught panic, as it is without TLS.
impl std::panic::UnwindSafe for TlsConfig {}
impl std::panic::RefUnwindSafe for TlsConfig {}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Settings to build a configuration from PEM files.
    pub fn builder() -> TlsConfigBuilder {
        TlsConfigBuilder::default()
    }

    /// A configuration of the program's own (its roots, client
    /// certificate, versions).
    pub fn from_rustls(config: Arc<rustls::ClientConfig>) -> TlsConfig {
        TlsConfig {
            config,
            server_name: None,
        }
    }

    /// The name the server's certificate must show, instead of the host of
    /// each address dialled (for servers reached by IP address whose
    /// certificate names a DNS name).
    pub fn server_name(mut self, name: impl Into<String>) -> TlsConfig {
        self.server_name = Some(name.into());
        self
    }

    pub(crate) fn server_name_for(&self, host: &str) -> io::Result<ServerName<'static>> {
        let name = self.server_name.as_deref().unwrap_or(host);
        ServerName::try_from(name.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TLS server name {name:?}: {e}"),
            )
        })
    }
}

/// Builds a [`TlsConfig`] from PEM files. Without a CA the system's roots
/// are trusted.
#[derive(Debug, Default, Clone)]
pub struct TlsConfigBuilder {
    ca: Option<PathBuf>,
    cert: Option<(PathBuf, PathBuf)>,
    server_name: Option<String>,
}

impl TlsConfigBuilder {
    /// Trusts the certificates of this PEM bundle (and not the system's
    /// roots).
    pub fn ca_file(mut self, path: impl AsRef<Path>) -> Self {
        self.ca = Some(path.as_ref().to_owned());
        self
    }

    /// Presents this client certificate (PEM chain) and its key (PEM:
    /// PKCS#8, PKCS#1 or SEC1), for a server with `TLS_CLIENT_CA`.
    pub fn client_cert_files(mut self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Self {
        self.cert = Some((cert.as_ref().to_owned(), key.as_ref().to_owned()));
        self
    }

    /// See [`TlsConfig::server_name`].
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Reads the files. [`Error::TlsConfig`] names a file that cannot be
    /// read or holds no certificate or key, or a key that does not match.
    pub fn build(self) -> Result<TlsConfig, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca {
            Some(path) => {
                for cert in certs(path)? {
                    roots
                        .add(cert)
                        .map_err(|e| bad(path, &format!("a CA certificate: {e}")))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                for cert in found.certs {
                    // A system root rustls cannot use is skipped, as
                    // browsers do.
                    let _ = roots.add(cert);
                }
                if roots.is_empty() {
                    return Err(Error::TlsConfig(format!(
                        "no usable system root certificates ({} errors); give a CA file",
                        found.errors.len()
                    )));
                }
            }
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::TlsConfig(e.to_string()))?
            .with_root_certificates(roots);
        let config = match &self.cert {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = certs(cert)?;
                let der = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| bad(key, &format!("no private key: {e}")))?;
                builder
                    .with_client_auth_cert(chain, der)
                    .map_err(|e| bad(key, &format!("the key does not fit the certificate: {e}")))?
            }
        };
        Ok(TlsConfig {
            config: Arc::new(config),
            server_name: self.server_name,
        })
    }
}

fn bad(path: &Path, what: &str) -> Error {
    Error::TlsConfig(format!("{}: {what}", path.display()))
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let list: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(path, &e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(path, &e.to_string()))?;
    if list.is_empty() {
        return Err(bad(path, "no certificate in it"));
    }
    Ok(list)
}
