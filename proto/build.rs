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
    tonic_prost_build::configure()
        .codec_path("crate::codec::StrictCodec")
        .file_descriptor_set_path(out_dir.join("todod_v1_descriptor.bin"))
        .compile_protos(&["todod/v1/todod.proto"], &["."])?;
    Ok(())
}
