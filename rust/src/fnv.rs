//! FNV-1a, 32 bit: the hash the Go kubelet's checkpoint checksums use
//! (hash/fnv.New32a over the checkpoint's printed text).

const OFFSET: u32 = 0x811c_9dc5;
const PRIME: u32 = 0x0100_0193;

/// The FNV-1a 32-bit hash of `data`, continuing from `state` (start from
/// `fnv32a_start()`): feeding a text in pieces gives the hash of the whole.
pub fn fnv32a_update(state: u32, data: &[u8]) -> u32 {
    data.iter()
        .fold(state, |h, &b| (h ^ u32::from(b)).wrapping_mul(PRIME))
}

pub const fn fnv32a_start() -> u32 {
    OFFSET
}

pub fn fnv32a(data: &[u8]) -> u32 {
    fnv32a_update(fnv32a_start(), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // Published FNV-1a 32 test vectors.
        assert_eq!(fnv32a(b""), 0x811c_9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c_292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn pieces_hash_as_the_whole() {
        let text = b"(string){\"entries\":{}}";
        for cut in 0..=text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(
                fnv32a_update(fnv32a_update(fnv32a_start(), a), b),
                fnv32a(text)
            );
        }
    }
}
