//! Certificate pinning for instances with a `tls_fingerprint` (typically a
//! self-signed Proxmox certificate).
//!
//! A pinned client trusts exactly one end-entity certificate: the one whose
//! SHA-256 over its DER bytes equals the configured fingerprint. Chain,
//! hostname and validity dates are not checked (the pin replaces them, as in
//! Proxmox's own clients), but the handshake signatures are still verified
//! with the aws-lc-rs provider's algorithms, so the server must hold the
//! certificate's private key. A mismatch fails the handshake with a
//! [`FingerprintMismatch`] that names the presented fingerprint, so the
//! operator can copy it into the configuration.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::Arc;

/// SHA-256 of a certificate's DER bytes.
pub fn fingerprint_of(der: &[u8]) -> [u8; 32] {
    Sha256::digest(der).into()
}

/// `AB:CD:...`: the form Proxmox shows and `tls_fingerprint` accepts.
pub fn format_fingerprint(fp: &[u8; 32]) -> String {
    let mut out = String::with_capacity(32 * 3);
    for (i, b) in fp.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push_str(&format!("{b:02X}"));
    }
    out
}

/// The server presented a certificate other than the pinned one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FingerprintMismatch {
    pub expected: [u8; 32],
    pub presented: [u8; 32],
}

impl fmt::Display for FingerprintMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TLS certificate fingerprint mismatch: server presented SHA-256 {}",
            format_fingerprint(&self.presented)
        )
    }
}

impl std::error::Error for FingerprintMismatch {}

/// Accepts exactly the end-entity certificate with the pinned fingerprint.
#[derive(Debug)]
pub struct FingerprintVerifier {
    expected: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

impl FingerprintVerifier {
    pub fn new(expected: [u8; 32], provider: &CryptoProvider) -> Self {
        FingerprintVerifier {
            expected,
            algorithms: provider.signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for FingerprintVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = fingerprint_of(end_entity.as_ref());
        if presented == self.expected {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                rustls::OtherError(Arc::new(FingerprintMismatch {
                    expected: self.expected,
                    presented,
                })),
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A rustls client configuration pinned to one certificate fingerprint,
/// offering HTTP/2 and HTTP/1.1 by ALPN.
pub fn pinned_config(expected: [u8; 32]) -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = Arc::new(FingerprintVerifier::new(expected, &provider));
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_is_colon_separated_upper_hex() {
        let mut fp = [0u8; 32];
        fp[0] = 0xab;
        fp[31] = 0x01;
        let s = format_fingerprint(&fp);
        assert!(s.starts_with("AB:00:"));
        assert!(s.ends_with(":01"));
        assert_eq!(s.len(), 32 * 3 - 1);
        // Round-trips through the config parser.
        assert_eq!(crate::model::parse_fingerprint(&s), Some(fp));
    }

    #[test]
    fn mismatch_message_names_presented_fingerprint() {
        let m = FingerprintMismatch {
            expected: [0; 32],
            presented: [0xff; 32],
        };
        let msg = m.to_string();
        assert!(msg.contains(&format_fingerprint(&[0xff; 32])), "{msg}");
        assert!(!msg.contains('\n'));
    }

    #[test]
    fn verifier_accepts_only_the_pinned_certificate() {
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let der = CertificateDer::from(vec![1u8, 2, 3]);
        let name = ServerName::try_from("example.test").unwrap();
        let good = FingerprintVerifier::new(fingerprint_of(&[1, 2, 3]), &provider);
        assert!(good.verify_server_cert(&der, &[], &name, &[], UnixTime::now()).is_ok());
        let bad = FingerprintVerifier::new([0; 32], &provider);
        let err = bad
            .verify_server_cert(&der, &[], &name, &[], UnixTime::now())
            .unwrap_err();
        assert!(matches!(
            err,
            rustls::Error::InvalidCertificate(CertificateError::Other(_))
        ));
        assert!(!good.supported_verify_schemes().is_empty());
    }
}
