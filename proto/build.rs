//! Compiles todod/v1/todod.proto with a vendored protoc, so a fresh machine
//! needs no system protoc.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        // SAFETY: build scripts are single-threaded until here.
        unsafe { std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed=todod");
    let proto = "todod/v1/todod.proto";
    let mut config = tonic_prost_build::configure()
        .codec_path("crate::codec::StrictCodec")
        // A listing carries thousands of tasks, which are mostly todos with
        // no progress, schedule or lease: boxed, those cost a pointer each
        // instead of 270 bytes inline, and every task moved, grown into a
        // vector or decoded is a third smaller.
        .boxed(".todod.v1.Task.progress")
        .boxed(".todod.v1.Task.schedule")
        .boxed(".todod.v1.Task.lease")
        // --json is the messages themselves (see src/json.rs).
        .type_attribute(".todod.v1", "#[derive(serde::Serialize)]");
    for (path, attribute) in json_fields(&std::fs::read_to_string(proto)?) {
        config = config.field_attribute(path, attribute);
    }
    config
        .file_descriptor_set_path(out_dir.join("todod_v1_descriptor.bin"))
        .compile_protos(&[proto], &["."])?;
    Ok(())
}

/// The serde attribute of each field whose JSON is not its plain value: a
/// `*_json` text nested under its name without the suffix, other texts null
/// when empty, a plan's counts a map. Read off the proto's own lines
/// (`message X {` ... `string name = N;`), so a new field is shaped too.
fn json_fields(proto: &str) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    let mut message = None;
    for line in proto.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("message ") {
            message = rest.split_whitespace().next().map(str::to_string);
            continue;
        }
        let Some(msg) = &message else { continue };
        if line == "}" {
            message = None;
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let path = |name: &str| format!(".todod.v1.{msg}.{name}");
        match words.as_slice() {
            ["string", name, "=", ..] => {
                let attribute = match name.strip_suffix("_json") {
                    Some(short) => format!(
                        "#[serde(rename = \"{short}\", serialize_with = \"crate::json::nested\")]"
                    ),
                    None => "#[serde(serialize_with = \"crate::json::empty_as_null\")]".into(),
                };
                fields.push((path(name), attribute));
            }
            ["repeated", "StatusCount", name, "=", ..] => fields.push((
                path(name),
                "#[serde(serialize_with = \"crate::json::counts\")]".into(),
            )),
            _ => {}
        }
    }
    fields
}
