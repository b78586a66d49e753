//! The Parquet file the Hugging Face trainers read as it is: columns `id`
//! (utf8), `input_ids` (list<int32>), `attention_mask` (list<int8>) and
//! `labels` (list<int64>, -100 where no loss is taken), the types `datasets`
//! itself writes for tokenized data. Built at the end of the pass from the
//! token store (tokens, sizes, loss mask, ids), in row groups bounded by
//! their token count, so memory does not grow with the input.
use std::io::{self, BufRead, Read, Write};
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Int32Array, Int64Array, Int8Array, ListArray, RecordBatch, StringArray,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use super::megatron::Dtype;

/// Tokens per row group (and per batch handed to the writer) at most.
const TOKENS_PER_GROUP: usize = 1 << 20;
const ROWS_PER_BATCH: usize = 4096;

fn list_of(t: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", t, true)))
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("input_ids", list_of(DataType::Int32), false),
        Field::new("attention_mask", list_of(DataType::Int8), false),
        Field::new("labels", list_of(DataType::Int64), false),
    ]))
}

/// The streams a Parquet file is built from.
pub struct Store<'a> {
    pub dtype: Dtype,
    pub count: u64,
    pub tokens: &'a mut dyn Read,
    pub sizes: &'a mut dyn Read,
    pub mask: &'a mut dyn Read,
    pub ids: &'a mut dyn BufRead,
}

/// Rows gathered for one batch.
#[derive(Default)]
struct Rows {
    ids: Vec<String>,
    offsets: Vec<i32>,
    tokens: Vec<i32>,
    mask: Vec<i8>,
    labels: Vec<i64>,
}

impl Rows {
    fn batch(&mut self, schema: &Arc<Schema>) -> io::Result<RecordBatch> {
        let offsets = OffsetBuffer::new(std::mem::take(&mut self.offsets).into());
        let field = |t: DataType| Arc::new(Field::new("item", t, true));
        let list = |t: DataType, values: ArrayRef| -> io::Result<ArrayRef> {
            Ok(Arc::new(
                ListArray::try_new(field(t), offsets.clone(), values, None)
                    .map_err(io::Error::other)?,
            ))
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(std::mem::take(&mut self.ids))),
            list(
                DataType::Int32,
                Arc::new(Int32Array::from(std::mem::take(&mut self.tokens))),
            )?,
            list(
                DataType::Int8,
                Arc::new(Int8Array::from(std::mem::take(&mut self.mask))),
            )?,
            list(
                DataType::Int64,
                Arc::new(Int64Array::from(std::mem::take(&mut self.labels))),
            )?,
        ];
        RecordBatch::try_new(schema.clone(), columns).map_err(io::Error::other)
    }
}

/// Writes the Parquet file of `store` to `out`.
pub fn write(store: Store<'_>, out: impl Write + Send) -> io::Result<()> {
    let schema = schema();
    // Uncompressed: no C codec in the build, and token ids compress little.
    let props = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_created_by("todod".into())
        .build();
    let mut writer =
        ArrowWriter::try_new(out, schema.clone(), Some(props)).map_err(io::Error::other)?;
    let width = store.dtype.width() as usize;
    let mut rows = Rows::default();
    let mut in_group = 0usize;
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
        if rows.offsets.is_empty() {
            rows.offsets.push(0);
        }
        for (i, chunk) in raw.chunks(width).enumerate() {
            let token = match store.dtype {
                Dtype::U16 => i32::from(u16::from_le_bytes([chunk[0], chunk[1]])),
                Dtype::I32 => i32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]),
            };
            rows.tokens.push(token);
            rows.mask.push(1);
            rows.labels
                .push(if mask[i] != 0 { i64::from(token) } else { -100 });
        }
        rows.offsets.push(rows.tokens.len() as i32);
        rows.ids.push(id);
        in_group += len;
        if rows.ids.len() >= ROWS_PER_BATCH || rows.tokens.len() >= TOKENS_PER_GROUP {
            writer
                .write(&rows.batch(&schema)?)
                .map_err(io::Error::other)?;
        }
        if in_group >= TOKENS_PER_GROUP {
            writer.flush().map_err(io::Error::other)?;
            in_group = 0;
        }
    }
    if !rows.ids.is_empty() {
        writer
            .write(&rows.batch(&schema)?)
            .map_err(io::Error::other)?;
    }
    writer.close().map_err(io::Error::other)?;
    Ok(())
}
