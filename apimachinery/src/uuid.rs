//! Random (version 4) UUIDs: what the API server puts in `metadata.uid`, and what the event
//! recorder falls back to for an Event name it cannot derive.
//!
//! apimachinery's `util/uuid.NewUUID` wraps google/uuid's `NewRandom`: 122 random bits, the
//! version nibble `4` and the RFC 4122 variant bits `10`, printed as lowercase
//! `8-4-4-4-12` hexadecimal. The randomness here is `fastrand` (a fast, non-cryptographic
//! generator seeded per thread): a uid must be unique, not secret.

/// A new random version-4 UUID, e.g. `1b4e28ba-2fa1-41d2-883f-0016d3cca427`.
pub fn new_v4() -> String {
    let mut b = [0u8; 16];
    for x in &mut b {
        *x = fastrand::u8(..);
    }
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::new_v4;

    #[test]
    fn has_the_shape_version_and_variant_of_a_v4_uuid() {
        let u = new_v4();
        let parts: Vec<&str> = u.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(
            u.chars()
                .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(&parts[2][..1], "4");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"));
        assert_ne!(new_v4(), u);
    }
}
