//! The Parquet file the Hugging Face trainers read as it is: columns `id`
//! (utf8), `input_ids` (list<int32>), `attention_mask` (list<int8>) and
//! `labels` (list<int64>, -100 where no loss is taken), the types `datasets`
//! itself writes for tokenized data. Built at the end of the pass from the
//! token store (tokens, sizes, loss mask, ids), in row groups bounded by
//! their token count, so memory does not grow with the input.
use std::io::{self, BufRead, Read, Write};
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::column::writer::ColumnWriter;
use parquet::data_type::ByteArray;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use super::megatron::Dtype;

/// Tokens per row group at most (a row longer than this is a group of its
/// own).
const TOKENS_PER_GROUP: usize = 1 << 20;

/// The file's schema, as Arrow's writer lays out `datasets`' types: a list
/// is a repeated group `list` around a nullable `item`, an int8 is an int32
/// annotated `INTEGER(8,true)`. Written with Parquet's own column writers,
/// without Arrow: the Arrow crates were about a tenth of a cold test build's
/// compile time, for these four columns.
const SCHEMA: &str = "
message schema {
  required binary id (STRING);
  required group input_ids (LIST) {
    repeated group list {
      optional int32 item;
    }
  }
  required group attention_mask (LIST) {
    repeated group list {
      optional int32 item (INTEGER(8,true));
    }
  }
  required group labels (LIST) {
    repeated group list {
      optional int64 item;
    }
  }
}";

/// The levels of a list column's value: defined down to the item (2), and
/// the first of its row (repetition 0) or not (1). An empty list is one
/// level pair, defined only to the list (0), with no value.
const ITEM: i16 = 2;
const EMPTY: i16 = 0;

/// The streams a Parquet file is built from.
pub struct Store<'a> {
    pub dtype: Dtype,
    pub count: u64,
    pub tokens: &'a mut dyn Read,
    pub sizes: &'a mut dyn Read,
    pub mask: &'a mut dyn Read,
    pub ids: &'a mut dyn BufRead,
}

/// The rows of one row group, column by column, with the levels the three
/// list columns share. The attention mask is a 1 for every token, written
/// from `tokens`' length.
#[derive(Default)]
struct Group {
    ids: Vec<ByteArray>,
    tokens: Vec<i32>,
    labels: Vec<i64>,
    definition: Vec<i16>,
    repetition: Vec<i16>,
}

impl Group {
    fn push_row(&mut self, id: String, tokens: impl Iterator<Item = (i32, bool)>) {
        let before = self.tokens.len();
        for (token, learned) in tokens {
            self.repetition
                .push(if self.tokens.len() == before { 0 } else { 1 });
            self.definition.push(ITEM);
            self.tokens.push(token);
            self.labels
                .push(if learned { i64::from(token) } else { -100 });
        }
        if self.tokens.len() == before {
            self.repetition.push(0);
            self.definition.push(EMPTY);
        }
        self.ids.push(ByteArray::from(id.into_bytes()));
    }

    /// Writes the group's four columns, in the schema's order, and empties it.
    fn write<W: Write + Send>(&mut self, file: &mut SerializedFileWriter<W>) -> io::Result<()> {
        let mut group = file.next_row_group().map_err(io::Error::other)?;
        let levels = (Some(&self.definition[..]), Some(&self.repetition[..]));
        let mask = vec![1; self.tokens.len()];
        let mut column = 0;
        while let Some(mut writer) = group.next_column().map_err(io::Error::other)? {
            let written = match (column, writer.untyped()) {
                (0, ColumnWriter::ByteArrayColumnWriter(w)) => w.write_batch(&self.ids, None, None),
                (1, ColumnWriter::Int32ColumnWriter(w)) => {
                    w.write_batch(&self.tokens, levels.0, levels.1)
                }
                (2, ColumnWriter::Int32ColumnWriter(w)) => {
                    w.write_batch(&mask, levels.0, levels.1)
                }
                (3, ColumnWriter::Int64ColumnWriter(w)) => {
                    w.write_batch(&self.labels, levels.0, levels.1)
                }
                _ => {
                    return Err(io::Error::other(format!(
                        "column {column} of the Parquet schema is not the type written"
                    )))
                }
            };
            written.map_err(io::Error::other)?;
            writer.close().map_err(io::Error::other)?;
            column += 1;
        }
        group.close().map_err(io::Error::other)?;
        *self = Group::default();
        Ok(())
    }
}

/// Writes the Parquet file of `store` to `out`.
pub fn write(store: Store<'_>, out: impl Write + Send) -> io::Result<()> {
    let schema = Arc::new(parse_message_type(SCHEMA).map_err(io::Error::other)?);
    // Uncompressed: no C codec in the build, and token ids compress little.
    let props = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_created_by("todod".into())
        .build();
    let mut file =
        SerializedFileWriter::new(out, schema, Arc::new(props)).map_err(io::Error::other)?;
    let width = store.dtype.width() as usize;
    let mut group = Group::default();
    let mut size = [0u8; 4];
    let mut line = String::new();
    let mut raw = Vec::new();
    let mut mask = Vec::new();
    for _ in 0..store.count {
        store.sizes.read_exact(&mut size)?;
        let len = u32::from_le_bytes(size) as usize;
        raw.resize(len * width, 0);
        store.tokens.read_exact(&mut raw)?;
        mask.resize(len, 0);
        store.mask.read_exact(&mut mask)?;
        line.clear();
        store.ids.read_line(&mut line)?;
        let id: String = serde_json::from_str(line.trim_end())
            .map_err(|e| io::Error::other(format!("the ids file is damaged: {e}")))?;
        let tokens = raw.chunks(width).zip(&mask).map(|(chunk, learned)| {
            let token = match store.dtype {
                Dtype::U16 => i32::from(u16::from_le_bytes([chunk[0], chunk[1]])),
                Dtype::I32 => i32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]),
            };
            (token, *learned != 0)
        });
        group.push_row(id, tokens);
        if group.tokens.len() >= TOKENS_PER_GROUP {
            group.write(&mut file)?;
        }
    }
    if !group.ids.is_empty() {
        group.write(&mut file)?;
    }
    file.close().map_err(io::Error::other)?;
    Ok(())
}
