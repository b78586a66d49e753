//! Reading back the Parquet file a tokenization writes, row by row.
use std::path::Path;

use arrow_array::{Array, Int32Array, Int64Array, Int8Array, ListArray, StringArray};

/// What the Parquet file holds, row by row: (id, input_ids, attention_mask, labels).
pub type Row = (String, Vec<i32>, Vec<i8>, Vec<i64>);

pub fn read_parquet(path: &Path) -> Vec<Row> {
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let column = |name: &str| batch.column_by_name(name).unwrap().clone();
        let ids = column("id");
        let ids = ids.as_any().downcast_ref::<StringArray>().unwrap();
        let list = |name: &str| {
            column(name)
                .as_any()
                .downcast_ref::<ListArray>()
                .unwrap()
                .clone()
        };
        let (input, attention, labels) =
            (list("input_ids"), list("attention_mask"), list("labels"));
        for r in 0..batch.num_rows() {
            let v = input.value(r);
            let a = attention.value(r);
            let l = labels.value(r);
            rows.push((
                ids.value(r).to_string(),
                v.as_any()
                    .downcast_ref::<Int32Array>()
                    .unwrap()
                    .values()
                    .to_vec(),
                a.as_any()
                    .downcast_ref::<Int8Array>()
                    .unwrap()
                    .values()
                    .to_vec(),
                l.as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec(),
            ));
        }
    }
    rows
}
