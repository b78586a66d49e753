//! Reading back the Parquet file a tokenization writes, row by row, with
//! Parquet's own record reader: each column must hold the logical type
//! `datasets` writes (a string, lists of int32, int8 and int64), or the
//! reading fails and says which.
use std::path::Path;

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::{Field, List};

/// What the Parquet file holds, row by row: (id, input_ids, attention_mask, labels).
pub type Row = (String, Vec<i32>, Vec<i8>, Vec<i64>);

pub fn read_parquet(path: &Path) -> Vec<Row> {
    let file = std::fs::File::open(path).unwrap();
    let reader = SerializedFileReader::new(file).unwrap();
    let names: Vec<String> = reader
        .metadata()
        .file_metadata()
        .schema()
        .get_fields()
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    assert_eq!(names, ["id", "input_ids", "attention_mask", "labels"]);
    reader
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            let row = row.unwrap();
            let columns: Vec<&Field> = row.get_column_iter().map(|(_, f)| f).collect();
            let Field::Str(id) = columns[0] else {
                panic!("id is not a string: {:?}", columns[0]);
            };
            (
                id.clone(),
                items(columns[1], "input_ids", |f| match f {
                    Field::Int(v) => Some(*v),
                    _ => None,
                }),
                items(columns[2], "attention_mask", |f| match f {
                    Field::Byte(v) => Some(*v),
                    _ => None,
                }),
                items(columns[3], "labels", |f| match f {
                    Field::Long(v) => Some(*v),
                    _ => None,
                }),
            )
        })
        .collect()
}

/// A list column's values, each of the type `value` accepts.
fn items<T>(field: &Field, name: &str, value: impl Fn(&Field) -> Option<T>) -> Vec<T> {
    let Field::ListInternal(list) = field else {
        panic!("{name} is not a list: {field:?}");
    };
    let list: &List = list;
    list.elements()
        .iter()
        .map(|f| value(f).unwrap_or_else(|| panic!("{name} holds {f:?}")))
        .collect()
}
