//! SHA-1, only to name Workloads exactly as Kueue does
//! (`jobframework.GetWorkloadNameForOwnerWithGVK` hashes with SHA-1): not
//! for anything that needs a secure hash, so `ring`'s legacy-use digest,
//! from the `ring` the tree already links for TLS.
use std::fmt::Write;

/// The SHA-1 digest of `data`, as 40 lower-case hex digits.
pub fn hex_digest(data: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, data);
    digest
        .as_ref()
        .iter()
        .fold(String::with_capacity(40), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

#[cfg(test)]
mod tests {
    use super::hex_digest;

    #[test]
    fn the_standard_test_vectors() {
        assert_eq!(hex_digest(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            hex_digest(b"abc"),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex_digest(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        // Longer than one block, not a multiple of it.
        assert_eq!(
            hex_digest(&[b'a'; 1000]),
            "291e9a6c66994949b57ba5e650361e98fc36b1ba"
        );
    }
}
