//! The parts of Go's `crypto/x509` this server needs beyond rustls' verifiers: reading a
//! certificate's subject and validity, and trusting a self-signed certificate that is its own
//! CA bundle.
//!
//! * **Client certificates** (kube-apiserver's `--client-ca-file`): the user is the subject's
//!   common name and the groups its organizations ([`subject`]), as in
//!   `k8s.io/apiserver/pkg/authentication/request/x509`'s `CommonNameUserConversion`.
//! * **Webhook servers** ([`GoServerVerifier`]): a webhook whose serving certificate is
//!   self-signed with `CA:TRUE` and is its own `caBundle` (what `openssl req -x509 ...` makes)
//!   is accepted by Go, which finds the leaf in the root pool and so builds a one-certificate
//!   chain; webpki refuses it (`CaUsedAsEndEntity`). The verifier accepts exactly that case —
//!   the presented leaf byte-for-byte equal to a certificate of the bundle, valid now, and
//!   valid for the name dialled — and leaves everything else to rustls' WebPKI verifier.
//!
//! The DER reader is bounded by its input (a certificate of at most a few kilobytes, already
//! accepted by the TLS stack) and never panics on malformed input: it answers `None`.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

/// One DER TLV: `(tag, content, rest)`.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The fields of a `TBSCertificate` this module reads.
struct Tbs<'a> {
    validity: &'a [u8],
    subject: &'a [u8],
}

fn tbs(der: &[u8]) -> Option<Tbs<'_>> {
    let (tag, cert, _) = tlv(der)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = tlv(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    let (tag, _, after) = tlv(rest)?;
    if tag == 0xa0 {
        rest = after; // [0] EXPLICIT version
    }
    let (_, _, rest) = tlv(rest)?; // serialNumber
    let (_, _, rest) = tlv(rest)?; // signature AlgorithmIdentifier
    let (_, _, rest) = tlv(rest)?; // issuer
    let (tag, validity, rest) = tlv(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, subject, _) = tlv(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    Some(Tbs { validity, subject })
}

/// A `Time` (UTCTime or GeneralizedTime, `Z` form) as Unix seconds.
fn time(tag: u8, text: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(text).ok()?;
    let s = s.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if s.len() == 12 => {
            let yy: i16 = s[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &s[2..])
        }
        0x18 if s.len() == 14 => (s[..4].parse().ok()?, &s[4..]),
        _ => return None,
    };
    let n = |r: std::ops::Range<usize>| rest.get(r)?.parse::<i8>().ok();
    let dt = jiff::civil::DateTime::new(year, n(0..2)?, n(2..4)?, n(4..6)?, n(6..8)?, n(8..10)?, 0)
        .ok()?;
    Some(
        dt.to_zoned(jiff::tz::TimeZone::UTC)
            .ok()?
            .timestamp()
            .as_second(),
    )
}

/// `(notBefore, notAfter)` in Unix seconds.
pub fn validity(der: &[u8]) -> Option<(i64, i64)> {
    let t = tbs(der)?;
    let (tag, before, rest) = tlv(t.validity)?;
    let not_before = time(tag, before)?;
    let (tag, after, _) = tlv(rest)?;
    Some((not_before, time(tag, after)?))
}

/// The subject's common name and organizations: a client certificate's user and groups.
pub fn subject(der: &[u8]) -> Option<(String, Vec<String>)> {
    let t = tbs(der)?;
    let mut cn = String::new();
    let mut orgs = vec![];
    read_name(t.subject, &mut cn, &mut orgs)?;
    Some((cn, orgs))
}

/// The common name and organizations of a `Name`'s relative distinguished names.
fn read_name(mut rdns: &[u8], cn: &mut String, orgs: &mut Vec<String>) -> Option<()> {
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const O: &[u8] = &[0x55, 0x04, 0x0a];
    while !rdns.is_empty() {
        let (tag, set, rest) = tlv(rdns)?;
        rdns = rest;
        if tag != SET {
            return None;
        }
        let mut atvs = set;
        while !atvs.is_empty() {
            let (tag, atv, rest) = tlv(atvs)?;
            atvs = rest;
            if tag != SEQUENCE {
                return None;
            }
            let (tag, oid, value) = tlv(atv)?;
            if tag != OID {
                return None;
            }
            let (vtag, text, _) = tlv(value)?;
            // UTF8String, PrintableString, IA5String, T61String: read as UTF-8 (the last two
            // are ASCII in practice); BMPString and others are skipped.
            if !matches!(vtag, 0x0c | 0x13 | 0x16 | 0x14) {
                continue;
            }
            let Ok(text) = std::str::from_utf8(text) else {
                continue;
            };
            if oid == CN {
                *cn = text.to_owned();
            } else if oid == O {
                orgs.push(text.to_owned());
            }
        }
    }
    Some(())
}

/// rustls' WebPKI verifier, plus Go's acceptance of a self-signed leaf that is itself one of
/// the trusted certificates (see the module docs).
#[derive(Debug)]
pub struct GoServerVerifier {
    inner: Arc<WebPkiServerVerifier>,
    roots: Vec<CertificateDer<'static>>,
}

impl GoServerVerifier {
    /// A verifier trusting `roots` (a webhook's `caBundle`; with `strict` false, such as for
    /// the system roots, unusable certificates are skipped instead of refused).
    pub fn new(roots: Vec<CertificateDer<'static>>, strict: bool) -> Result<Self, String> {
        let mut store = rustls::RootCertStore::empty();
        for cert in &roots {
            if let Err(e) = store.add(cert.clone())
                && strict
            {
                return Err(format!("caBundle holds an unusable certificate: {e}"));
            }
        }
        let inner = WebPkiServerVerifier::builder(Arc::new(store))
            .build()
            .map_err(|e| format!("unable to load root certificates: {e}"))?;
        Ok(GoServerVerifier { inner, roots })
    }
}

impl ServerCertVerifier for GoServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let is_root = self.roots.iter().any(|r| r.as_ref() == end_entity.as_ref());
        if !is_root {
            return self.inner.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            );
        }
        // Trusted as such: the chain is the leaf alone. Go still checks its validity period
        // and the name.
        let Some((not_before, not_after)) = validity(end_entity.as_ref()) else {
            return Err(Error::InvalidCertificate(CertificateError::BadEncoding));
        };
        let now = now.as_secs() as i64;
        if now < not_before {
            return Err(Error::InvalidCertificate(CertificateError::NotValidYet));
        }
        if now > not_after {
            return Err(Error::InvalidCertificate(CertificateError::Expired));
        }
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str, orgs: &[&str], ca: bool) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".into()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        if ca {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        params.not_before = rcgen::date_time_ymd(2020, 1, 2);
        params.not_after = rcgen::date_time_ymd(2049, 12, 31);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn subject_gives_the_common_name_and_every_organization() {
        let der = cert("alice", &["system:masters"], false);
        assert_eq!(
            subject(&der),
            Some(("alice".to_owned(), vec!["system:masters".to_owned()]))
        );
        // Two organizations in one name (rcgen's DistinguishedName keeps one per type):
        // SEQUENCE { SET { CN=bob }, SET { O=a }, SET { O=b } } spliced in place of the subject.
        let name = [
            0x30, 0x26, 0x31, 0x0c, 0x30, 0x0a, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x03, b'b',
            b'o', b'b', 0x31, 0x0a, 0x30, 0x08, 0x06, 0x03, 0x55, 0x04, 0x0a, 0x0c, 0x01, b'a',
            0x31, 0x0a, 0x30, 0x08, 0x06, 0x03, 0x55, 0x04, 0x0a, 0x0c, 0x01, b'b',
        ];
        let (_, rdns, _) = tlv(&name).unwrap();
        let mut cn = String::new();
        let mut orgs = vec![];
        read_name(rdns, &mut cn, &mut orgs).unwrap();
        assert_eq!(
            (cn.as_str(), orgs),
            ("bob", vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(subject(&der[..der.len() / 2]), None);
        assert_eq!(subject(&[]), None);
    }

    /// Malformed certificates are `None`, never a panic: every truncation, every single-byte
    /// change, and lengths that claim more than there is or do not fit the reader.
    #[test]
    fn malformed_certificates_are_refused_without_panicking() {
        let der = cert("carol", &["devs"], false);
        for n in 0..der.len() {
            assert_eq!(subject(&der[..n]), None, "cut at {n}");
            assert_eq!(validity(&der[..n]), None, "cut at {n}");
        }
        for i in 0..der.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut bad = der.clone();
                bad[i] ^= flip;
                // Whatever it answers, it answers.
                let _ = (subject(&bad), validity(&bad));
            }
        }
        // A length of five bytes, and one of 2^32 - 1 bytes over a short input.
        assert_eq!(tlv(&[0x30, 0x85, 1, 0, 0, 0, 0]), None);
        assert_eq!(tlv(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff, 0]), None);
        assert_eq!(subject(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        // A certificate that is not a SEQUENCE.
        let mut bad = der.clone();
        bad[0] = 0x31;
        assert_eq!(subject(&bad), None);
    }

    #[test]
    fn validity_reads_both_time_forms() {
        let der = cert("x", &[], true);
        let (nb, na) = validity(&der).unwrap();
        assert_eq!(nb, 1_577_923_200); // 2020-01-02T00:00:00Z
        assert_eq!(na, 2_524_521_600); // 2049-12-31T00:00:00Z
        assert_eq!(time(0x17, b"491231000000Z"), Some(2_524_521_600));
        assert_eq!(time(0x18, b"20491231000000Z"), Some(2_524_521_600));
        assert_eq!(time(0x17, b"4912310000Z"), None);
    }
}
