//! Token ids a server generated, against the ids a tokenization gives the
//! same answer: where they part, and the hash a record keeps of a prompt's.
use sha2::{Digest, Sha256};

/// sha256 (hex) of `ids` as little-endian u32s: what numpy's
/// `np.asarray(ids, "<u4").tobytes()` hashes to.
pub fn sha256_of(ids: &[u32]) -> String {
    let mut hasher = Sha256::new();
    for id in ids {
        hasher.update(id.to_le_bytes());
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Where the ids a tokenization trains on for an answer (`trained`: the
/// answer's turn as the template renders it, its end-of-turn framing
/// included) stop matching the ids the model `generated`: `None` when the
/// generated ids are where the trained ones begin. A server includes the
/// end-of-turn token it stopped at or not (vLLM and llama.cpp do, not in a
/// stream's last chunk); the template writes what follows it (a newline),
/// which the model never generated: so the trained ids may go on past the
/// generated ones, and the generated may not go past the trained.
pub fn first_difference(trained: &[u32], generated: &[u32]) -> Option<usize> {
    let same = trained
        .iter()
        .zip(generated)
        .take_while(|(a, b)| a == b)
        .count();
    (same < generated.len()).then_some(same)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_ids_must_begin_the_trained_ones() {
        // The answer, its end of turn, the template's newline.
        let trained = [57, 5248, 2, 198];
        assert_eq!(first_difference(&trained, &[57, 5248, 2]), None);
        assert_eq!(first_difference(&trained, &[57, 5248]), None);
        assert_eq!(first_difference(&trained, &[]), None);
        assert_eq!(first_difference(&trained, &[57, 5249, 2]), Some(1));
        assert_eq!(first_difference(&trained, &[57, 5248, 2, 198, 7]), Some(4));
        assert_eq!(first_difference(&[], &[1]), Some(0));
    }

    #[test]
    fn the_prompt_hash_is_of_little_endian_u32s() {
        // printf '\x01\x00\x00\x00\x02\x00\x00\x00' | sha256sum
        assert_eq!(
            sha256_of(&[1, 2]),
            "34fb5c825de7ca4aea6e712f19d439c1da0c92c37b423936c5f618545ca4fa1f"
        );
    }
}
