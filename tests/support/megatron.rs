//! An independent reader of Megatron-LM's indexed dataset, written from the
//! format description (megatron/core/datasets/indexed_dataset.py), not from
//! todod's writer: `PREFIX.idx` is the 9-byte magic `MMIDIDX\0\0`, u64
//! version 1, u8 dtype code, u64 sequence count, u64 document count, then
//! int32 sizes, int64 byte pointers and int64 document indices, all little
//! endian; `PREFIX.bin` holds the tokens in that dtype, back to back.
use std::path::Path;

pub struct Indexed {
    /// Megatron's dtype code (8 = uint16, 4 = int32).
    pub dtype: u8,
    pub sizes: Vec<i32>,
    pub pointers: Vec<i64>,
    pub documents: Vec<i64>,
    /// Every sequence's tokens.
    pub sequences: Vec<Vec<u32>>,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Reads `prefix.idx` and `prefix.bin`; panics on any departure from the format.
pub fn read(prefix: &Path) -> Indexed {
    let with = |suffix: &str| format!("{}{suffix}", prefix.display());
    let idx = std::fs::read(with(".idx")).expect("read .idx");
    let bin = std::fs::read(with(".bin")).expect("read .bin");
    assert_eq!(&idx[..9], b"MMIDIDX\x00\x00", "magic");
    assert_eq!(u64_at(&idx, 9), 1, "version");
    let dtype = idx[17];
    let width = match dtype {
        8 => 2,
        4 => 4,
        other => panic!("unexpected dtype code {other}"),
    };
    let n = u64_at(&idx, 18) as usize;
    let docs = u64_at(&idx, 26) as usize;
    let mut at = 34;
    let sizes: Vec<i32> = (0..n)
        .map(|i| i32::from_le_bytes(idx[at + 4 * i..at + 4 * i + 4].try_into().unwrap()))
        .collect();
    at += 4 * n;
    let pointers: Vec<i64> = (0..n)
        .map(|i| i64::from_le_bytes(idx[at + 8 * i..at + 8 * i + 8].try_into().unwrap()))
        .collect();
    at += 8 * n;
    let documents: Vec<i64> = (0..docs)
        .map(|i| i64::from_le_bytes(idx[at + 8 * i..at + 8 * i + 8].try_into().unwrap()))
        .collect();
    at += 8 * docs;
    assert_eq!(at, idx.len(), "nothing after the document indices");
    let mut expected_pointer = 0i64;
    let sequences = (0..n)
        .map(|i| {
            assert_eq!(pointers[i], expected_pointer, "pointer {i}");
            let start = pointers[i] as usize;
            let end = start + sizes[i] as usize * width;
            expected_pointer = end as i64;
            bin[start..end]
                .chunks(width)
                .map(|c| match width {
                    2 => u32::from(u16::from_le_bytes([c[0], c[1]])),
                    _ => u32::from_le_bytes(c.try_into().unwrap()),
                })
                .collect()
        })
        .collect();
    assert_eq!(
        expected_pointer as usize,
        bin.len(),
        ".bin holds exactly the sequences"
    );
    Indexed {
        dtype,
        sizes,
        pointers,
        documents,
        sequences,
    }
}
