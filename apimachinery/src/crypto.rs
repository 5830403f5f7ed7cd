//! The process-wide TLS crypto provider.
//!
//! rustls panics with "no process-level CryptoProvider available" when two providers are
//! compiled in and none was chosen. This workspace compiles only ring, and both TLS sides (the
//! client's transport and the embedded API server's listener) call [`install_provider`] before
//! they build a TLS configuration.

/// Installs rustls' process-wide crypto provider (ring) if none is installed yet. Calling it more
/// than once, or from several threads at once, is harmless.
pub fn install_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err means another thread installed one first: also fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn installs_once_and_again() {
        super::install_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
        super::install_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
