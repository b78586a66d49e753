//! Megatron-LM's indexed dataset, as `megatron/core/datasets/indexed_dataset.py`
//! writes it: `PREFIX.bin` holds every document's tokens back to back in one
//! dtype; `PREFIX.idx` is
//!
//! | bytes | what |
//! |---|---|
//! | 9 | magic `MMIDIDX\0\0` |
//! | u64 | version 1 |
//! | u8 | dtype code: 8 uint16, 4 int32 |
//! | u64 | S, the number of sequences |
//! | u64 | D, the number of document indices (documents + 1) |
//! | i32 × S | sequence lengths, in tokens |
//! | i64 × S | sequence pointers: byte offsets into `.bin`, the first 0 |
//! | i64 × D | document indices, 0, 1, …, S (one sequence per document) |
//!
//! everything little-endian. The dtype is uint16 when the vocabulary has
//! fewer than 65,500 tokens (`DType.optimal_dtype`), else int32.
use std::io::{self, Read, Write};

/// The token width of a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    U16,
    I32,
}

impl Dtype {
    /// Megatron's choice for a vocabulary of `size` tokens.
    pub fn for_vocab(size: usize) -> Dtype {
        if size < 65_500 {
            Dtype::U16
        } else {
            Dtype::I32
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Dtype::U16 => 8,
            Dtype::I32 => 4,
        }
    }

    pub fn width(self) -> u64 {
        match self {
            Dtype::U16 => 2,
            Dtype::I32 => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dtype::U16 => "uint16",
            Dtype::I32 => "int32",
        }
    }

    /// Appends ids in this dtype; an id that does not fit is an error (a
    /// tokenizer whose ids exceed its own vocabulary).
    pub fn encode(self, ids: &[u32], out: &mut Vec<u8>) -> Result<(), String> {
        out.reserve(ids.len() * self.width() as usize);
        for &id in ids {
            match self {
                Dtype::U16 => {
                    let id = u16::try_from(id)
                        .map_err(|_| format!("token id {id} does not fit the uint16 dataset"))?;
                    out.extend_from_slice(&id.to_le_bytes());
                }
                Dtype::I32 => {
                    let id = i32::try_from(id)
                        .map_err(|_| format!("token id {id} does not fit the int32 dataset"))?;
                    out.extend_from_slice(&id.to_le_bytes());
                }
            }
        }
        Ok(())
    }
}

pub const MAGIC: &[u8; 9] = b"MMIDIDX\x00\x00";

/// Writes the `.idx` of `count` documents whose token counts `sizes` yields
/// (u32 LE each, as the phase's sizes file holds them). Streams: memory does
/// not grow with the number of documents.
pub fn write_index(
    dtype: Dtype,
    count: u64,
    sizes: &mut dyn FnMut() -> io::Result<Box<dyn Read>>,
    out: &mut dyn Write,
) -> io::Result<()> {
    out.write_all(MAGIC)?;
    out.write_all(&1u64.to_le_bytes())?;
    out.write_all(&[dtype.code()])?;
    out.write_all(&count.to_le_bytes())?;
    out.write_all(&(count + 1).to_le_bytes())?;
    // Three passes over the sizes: lengths, pointers, then the documents.
    let mut buf = [0u8; 4];
    let mut read = sizes()?;
    for _ in 0..count {
        read.read_exact(&mut buf)?;
        let len = u32::from_le_bytes(buf);
        let len = i32::try_from(len)
            .map_err(|_| io::Error::other(format!("a document of {len} tokens is too long")))?;
        out.write_all(&len.to_le_bytes())?;
    }
    let mut read = sizes()?;
    let mut pointer: i64 = 0;
    for _ in 0..count {
        out.write_all(&pointer.to_le_bytes())?;
        read.read_exact(&mut buf)?;
        pointer += i64::from(u32::from_le_bytes(buf)) * dtype.width() as i64;
    }
    for i in 0..=count {
        out.write_all(&(i as i64).to_le_bytes())?;
    }
    Ok(())
}

/// Reads an `.idx` and `.bin` back, from the format description alone: the
/// token ids of each document. For tests and checks.
pub fn read(idx: &[u8], bin: &[u8]) -> Result<Vec<Vec<u32>>, String> {
    let u64_at = |at: usize| -> Result<u64, String> {
        idx.get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or_else(|| format!("the index ends before byte {}", at + 8))
    };
    if idx.get(..9) != Some(&MAGIC[..]) {
        return Err("not a Megatron index (magic)".into());
    }
    if u64_at(9)? != 1 {
        return Err("unknown index version".into());
    }
    let width = match idx.get(17) {
        Some(8) => 2,
        Some(4) => 4,
        other => return Err(format!("dtype code {other:?} is not uint16 or int32")),
    };
    let (s, d) = (u64_at(18)? as usize, u64_at(26)? as usize);
    let lens_at = 34;
    let ptrs_at = lens_at + 4 * s;
    let docs_at = ptrs_at + 8 * s;
    if idx.len() != docs_at + 8 * d {
        return Err(format!(
            "the index is {} bytes, not {}",
            idx.len(),
            docs_at + 8 * d
        ));
    }
    let mut docs = Vec::with_capacity(s);
    for i in 0..s {
        let len = i32::from_le_bytes(
            idx[lens_at + 4 * i..lens_at + 4 * i + 4]
                .try_into()
                .unwrap(),
        );
        let ptr = i64::from_le_bytes(
            idx[ptrs_at + 8 * i..ptrs_at + 8 * i + 8]
                .try_into()
                .unwrap(),
        );
        let (start, end) = (ptr as usize, ptr as usize + len as usize * width);
        let bytes = bin
            .get(start..end)
            .ok_or_else(|| format!("sequence {i} runs past the end of the .bin"))?;
        docs.push(
            bytes
                .chunks(width)
                .map(|c| {
                    if width == 2 {
                        u32::from(u16::from_le_bytes([c[0], c[1]]))
                    } else {
                        i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u32
                    }
                })
                .collect(),
        );
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_reads_back_to_its_documents() {
        let docs: Vec<Vec<u32>> = vec![vec![1, 2, 3], vec![], vec![65_000, 7]];
        for dtype in [Dtype::U16, Dtype::I32] {
            let mut bin = Vec::new();
            let mut sizes = Vec::new();
            for d in &docs {
                dtype.encode(d, &mut bin).unwrap();
                sizes.extend_from_slice(&(d.len() as u32).to_le_bytes());
            }
            let mut idx = Vec::new();
            let mut source = || Ok(Box::new(std::io::Cursor::new(sizes.clone())) as Box<dyn Read>);
            write_index(dtype, docs.len() as u64, &mut source, &mut idx).unwrap();
            assert_eq!(idx.len(), 34 + 12 * 3 + 8 * 4);
            assert_eq!(read(&idx, &bin).unwrap(), docs);
        }
        assert_eq!(Dtype::for_vocab(49_152), Dtype::U16);
        assert_eq!(Dtype::for_vocab(65_500), Dtype::I32);
        assert!(Dtype::U16.encode(&[70_000], &mut Vec::new()).is_err());
    }
}
