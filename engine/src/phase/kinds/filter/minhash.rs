//! Near duplicates by MinHash over word shingles, found with LSH: plain
//! logic, no I/O, the same answer on every machine and every version (the
//! hashes are written out here, not taken from `std`, whose hasher may
//! change between releases, and the kept set must not when a run resumes
//! after an upgrade).
//!
//! A text is normalised (lowercase, punctuation dropped, whitespace
//! collapsed), cut into shingles of `shingle_words` words, and each of
//! `permutations` hash functions keeps its smallest value over the shingles:
//! the share of equal values between two signatures estimates the Jaccard
//! similarity of their shingle sets. Signatures are split into `bands` of
//! `rows` values; two texts that agree on a whole band are candidates, and a
//! candidate is a near duplicate when its estimated similarity reaches the
//! threshold (so LSH only finds candidates, and the threshold decides).
use std::collections::HashMap;

/// A 64-bit hash of `bytes` with `seed` (FNV-1a, then SplitMix64's
/// finaliser for its avalanche).
pub fn hash64(bytes: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The words of `text` as near-duplicate and exact-duplicate checks read
/// it: lowercase, letters and digits only, split on everything else.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// A 128-bit fingerprint of a text's normalised words: equal for texts
/// that differ only in case, punctuation and spacing.
pub fn fingerprint(words: &[String]) -> u128 {
    let joined = words.join(" ");
    let a = hash64(joined.as_bytes(), 0x5eed_0001);
    let b = hash64(joined.as_bytes(), 0x5eed_0002);
    (u128::from(a) << 64) | u128::from(b)
}

/// How near duplicates are found.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Params {
    /// Estimated Jaccard similarity at or above which a text is a near
    /// duplicate of one kept before it.
    pub threshold: f64,
    pub shingle_words: usize,
    pub permutations: usize,
    pub bands: usize,
}

impl Params {
    /// The bands for `threshold` over `permutations` values: the fewest
    /// (the least work) with which a pair at the threshold becomes a
    /// candidate with probability 99 % or more (`1 - (1 - t^r)^b`); the
    /// estimated similarity then decides.
    pub fn bands_for(threshold: f64, permutations: usize) -> usize {
        (1..=permutations)
            .filter(|b| permutations.is_multiple_of(*b))
            .find(|&b| {
                let r = (permutations / b) as i32;
                1.0 - (1.0 - threshold.powi(r)).powi(b as i32) >= 0.99
            })
            .unwrap_or(permutations)
    }

    fn rows(&self) -> usize {
        self.permutations / self.bands
    }
}

/// The MinHash signature of `words` (`None` for a text shorter than one
/// shingle: too short to judge as near anything).
pub fn signature(words: &[String], params: &Params) -> Option<Vec<u32>> {
    let k = params.shingle_words.max(1);
    if words.len() < k {
        return None;
    }
    let shingles: Vec<u64> = words
        .windows(k)
        .map(|w| hash64(w.join(" ").as_bytes(), 0x5417_9e1e))
        .collect();
    let seeds = (0..params.permutations as u64).map(|i| mix(i.wrapping_add(0x9e37_79b9_7f4a_7c15)));
    Some(
        seeds
            .map(|seed| {
                shingles
                    .iter()
                    .map(|s| (mix(s ^ seed) >> 32) as u32)
                    .min()
                    .unwrap_or(u32::MAX)
            })
            .collect(),
    )
}

/// The estimated Jaccard similarity of two signatures.
pub fn similarity(a: &[u32], b: &[u32]) -> f64 {
    if a.is_empty() || a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / a.len() as f64
}

/// No entry.
const NONE: u32 = u32::MAX;

/// The signatures kept so far, found by band. Each kept signature has one
/// entry per band; a band's key (the band's number and values, hashed)
/// leads to the newest entry with it, and each entry to the one before it
/// with the same key: a few bytes an entry, not a list per bucket.
#[derive(Debug, Default)]
pub struct Index {
    params: Option<Params>,
    /// Kept ids and signatures, in the order they were kept.
    ids: Vec<String>,
    signatures: Vec<u32>,
    heads: HashMap<u64, u32>,
    /// Entry `kept * bands + band`: the previous entry with the same key.
    next: Vec<u32>,
}

impl Index {
    pub fn new(params: Params) -> Index {
        Index {
            params: Some(params),
            ..Index::default()
        }
    }

    fn bands(&self) -> usize {
        self.params.map_or(1, |p| p.bands).max(1)
    }

    fn band_keys<'a>(&self, signature: &'a [u32]) -> impl Iterator<Item = u64> + 'a {
        let rows = self.params.map_or(1, |p| p.rows()).max(1);
        signature.chunks(rows).enumerate().map(|(band, values)| {
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            hash64(&bytes, band as u64 + 1)
        })
    }

    fn kept_signature(&self, i: usize) -> &[u32] {
        let n = self.params.map_or(0, |p| p.permutations);
        &self.signatures[i * n..(i + 1) * n]
    }

    /// The kept text `signature` is a near duplicate of (its id, and the
    /// estimated similarity), if any: the most similar candidate, the
    /// first kept of equals.
    pub fn near(&self, signature: &[u32]) -> Option<(&str, f64)> {
        let threshold = self.params?.threshold;
        let bands = self.bands();
        let mut best: Option<(usize, f64)> = None;
        let mut seen = std::collections::HashSet::new();
        for key in self.band_keys(signature) {
            let mut entry = self.heads.get(&key).copied().unwrap_or(NONE);
            while entry != NONE {
                let i = entry as usize / bands;
                entry = self.next[entry as usize];
                if !seen.insert(i) {
                    continue;
                }
                let s = similarity(signature, self.kept_signature(i));
                if s >= threshold && best.is_none_or(|(j, b)| s > b || (s == b && i < j)) {
                    best = Some((i, s));
                }
            }
        }
        best.map(|(i, s)| (self.ids[i].as_str(), s))
    }

    /// Keeps `signature` (of the text with id `id`) for the texts after it.
    pub fn keep(&mut self, id: &str, signature: &[u32]) {
        let i = self.ids.len();
        let bands = self.bands();
        let keys: Vec<u64> = self.band_keys(signature).collect();
        for (band, key) in keys.into_iter().enumerate() {
            let entry = (i * bands + band) as u32;
            let previous = self.heads.insert(key, entry).unwrap_or(NONE);
            self.next.push(previous);
        }
        self.ids.push(id.to_string());
        self.signatures.extend_from_slice(signature);
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(threshold: f64) -> Params {
        Params {
            threshold,
            shingle_words: 3,
            permutations: 128,
            bands: Params::bands_for(threshold, 128),
        }
    }

    fn sig(text: &str, p: &Params) -> Vec<u32> {
        signature(&words(text), p).unwrap()
    }

    const BASE: &str = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm \
                        mat in the afternoon sun and the birds sing in the old oak tree by the river";

    #[test]
    fn normalised_text_has_one_fingerprint() {
        assert_eq!(
            fingerprint(&words("Hello,   World!")),
            fingerprint(&words("hello world"))
        );
        assert_ne!(
            fingerprint(&words("hello world")),
            fingerprint(&words("hello there world"))
        );
        // Stable across versions: the kept set of a resumed run depends on it.
        assert_eq!(hash64(b"todod", 0), hash64(b"todod", 0));
        assert_eq!(hash64(b"", 0), 0xf52a_15e9_a9b5_e89b);
    }

    #[test]
    fn similar_texts_estimate_near_their_jaccard() {
        let p = params(0.8);
        let a = sig(BASE, &p);
        assert_eq!(similarity(&a, &a), 1.0);
        let one_word = BASE.replace("lazy", "sleepy");
        let s = similarity(&a, &sig(&one_word, &p));
        // 3 of 35 shingles change: Jaccard 32/38 = 0.84.
        assert!((0.7..0.95).contains(&s), "{s}");
        let other = "an entirely different answer about routing experts in mixture of \
                     experts models with a learned gate and a load balancing loss term";
        assert!(similarity(&a, &sig(other, &p)) < 0.1);
    }

    #[test]
    fn the_index_finds_a_near_duplicate_and_not_a_stranger() {
        let p = params(0.7);
        let mut index = Index::new(p);
        index.keep("a", &sig(BASE, &p));
        let (id, s) = index.near(&sig(&BASE.replace("lazy", "sleepy"), &p)).unwrap();
        assert_eq!(id, "a");
        assert!(s >= 0.7);
        let other = "an entirely different answer about routing experts in mixture of \
                     experts models with a learned gate and a load balancing loss term";
        assert!(index.near(&sig(other, &p)).is_none());
        assert!(signature(&words("too short"), &p).is_none());
    }

    #[test]
    fn bands_put_the_s_curve_below_the_threshold() {
        for threshold in [0.5, 0.7, 0.8, 0.9] {
            let b = Params::bands_for(threshold, 128);
            assert_eq!(128 % b, 0);
            let r = (128 / b) as f64;
            let t = (1.0 / b as f64).powf(1.0 / r);
            assert!(t < threshold, "{threshold}: b={b} t={t}");
            // A pair at the threshold is a candidate with probability over 99 %.
            let p = 1.0 - (1.0 - threshold.powf(r)).powf(b as f64);
            assert!(p > 0.99, "{threshold}: b={b} p={p}");
        }
    }

    /// The exact Jaccard similarity of two texts' `k`-word shingle sets.
    fn jaccard(a: &[String], b: &[String], k: usize) -> f64 {
        let set = |w: &[String]| -> std::collections::HashSet<Vec<String>> {
            w.windows(k).map(<[String]>::to_vec).collect()
        };
        let (a, b) = (set(a), set(b));
        a.intersection(&b).count() as f64 / a.union(&b).count() as f64
    }

    /// README's table (the filter's section), rows of answer length and
    /// words changed: the mean exact similarity of the changed answer to
    /// the original at the default shingle size (5 words), and the share of
    /// changed answers the filter calls near duplicates at each threshold.
    const WORDS_CHANGED_TABLE: &str = "\
| words | changed | similarity | caught at 0.6 | at 0.7 | at 0.8 |
| --- | --- | --- | --- | --- | --- |
| 30 | 1 | 0.71 | 98 % | 48 % | 15 % |
| 30 | 2 | 0.55 | 33 % | 9 % | 2 % |
| 30 | 3 | 0.40 | 4 % | 1 % | 0 % |
| 30 | 5 | 0.24 | 0 % | 0 % | 0 % |
| 60 | 1 | 0.84 | 100 % | 100 % | 91 % |
| 60 | 2 | 0.72 | 100 % | 61 % | 10 % |
| 60 | 3 | 0.62 | 66 % | 12 % | 1 % |
| 60 | 5 | 0.47 | 5 % | 0 % | 0 % |
| 60 | 10 | 0.24 | 0 % | 0 % | 0 % |
| 200 | 1 | 0.95 | 100 % | 100 % | 100 % |
| 200 | 2 | 0.91 | 100 % | 100 % | 100 % |
| 200 | 3 | 0.86 | 100 % | 100 % | 97 % |
| 200 | 5 | 0.79 | 100 % | 98 % | 40 % |
| 200 | 10 | 0.63 | 71 % | 7 % | 0 % |
";

    /// The near-duplicate parameters a spec gets that names only its
    /// threshold: the shingle size and permutations are the defaults.
    fn default_params(threshold: f64) -> Params {
        let spec = format!(
            r#"{{"input": "/in.jsonl", "output": "/out.jsonl",
                "near_duplicates": {{"threshold": {threshold}}}}}"#
        );
        super::super::FilterSpec::parse(&spec)
            .unwrap()
            .near_duplicates
            .unwrap()
    }

    const TRIALS: u64 = 400;
    const THRESHOLDS: [f64; 3] = [0.6, 0.7, 0.8];

    /// One row of the table: `TRIALS` seeded answers of `length` random
    /// words, each against itself with `changed` words replaced at random
    /// places. Their mean exact similarity, and how many of them each
    /// threshold calls a near duplicate.
    fn words_changed_row(length: usize, changed: usize) -> (f64, [u64; 3]) {
        let params = THRESHOLDS.map(default_params);
        let mut similarity_sum = 0.0;
        let mut caught = [0u64; 3];
        for trial in 0..TRIALS {
            let mut state = ((length as u64) << 40) ^ ((changed as u64) << 20) ^ trial;
            let mut next = || {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                mix(state)
            };
            let original: Vec<String> = (0..length).map(|_| format!("w{}", next() % 5000)).collect();
            let mut edited = original.clone();
            let mut places = std::collections::BTreeSet::new();
            while places.len() < changed {
                places.insert((next() % length as u64) as usize);
            }
            for (i, place) in places.into_iter().enumerate() {
                edited[place] = format!("changed{i}");
            }
            similarity_sum += jaccard(&original, &edited, params[0].shingle_words);
            // The signature does not depend on the threshold.
            let kept = signature(&original, &params[0]).unwrap();
            let asked = signature(&edited, &params[0]).unwrap();
            for (caught, p) in caught.iter_mut().zip(params) {
                let mut index = Index::new(p);
                index.keep("original", &kept);
                *caught += u64::from(index.near(&asked).is_some());
            }
        }
        (similarity_sum / TRIALS as f64, caught)
    }

    /// How similar an answer with some of its words changed is, and what
    /// each threshold catches, through the filter's own MinHash and LSH at
    /// the default shingle size and permutations. The table is README's,
    /// row for row.
    #[test]
    fn words_changed_against_similarity_and_what_each_threshold_catches() {
        // The header, as the table has it.
        let mut table: String = WORDS_CHANGED_TABLE
            .lines()
            .take(2)
            .map(|line| format!("{line}\n"))
            .collect();
        let share = |n: u64| format!("{} %", (n * 100 + TRIALS / 2) / TRIALS);
        for length in [30usize, 60, 200] {
            // Rows where the changes would break every shingle are left out.
            for changed in [1usize, 2, 3, 5, 10].into_iter().filter(|c| c * 5 < length) {
                let (similarity, caught) = words_changed_row(length, changed);
                table.push_str(&format!(
                    "| {length} | {changed} | {similarity:.2} | {} | {} | {} |\n",
                    share(caught[0]),
                    share(caught[1]),
                    share(caught[2]),
                ));
            }
        }
        println!("{table}");
        assert_eq!(table, WORDS_CHANGED_TABLE, "the table changed: README's too?");
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
            .expect("README.md");
        assert!(
            readme.contains(WORDS_CHANGED_TABLE),
            "README's filter section must hold the table as this test prints it"
        );
    }
}
