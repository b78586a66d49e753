//! The clients build without the daemon's dependencies: `todoctl` (and the
//! MCP server inside it) reach todod through `todod-proto` only, so building
//! them compiles no SQLite, no HTTP client, no tokenizers.

#[test]
fn todoctl_builds_without_the_daemons_dependencies() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "todoctl",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        crates.contains(&"todod-proto"),
        "todoctl should use todod-proto:\n{tree}"
    );
    for forbidden in [
        "todod",
        "sqlx",
        "sqlx-core",
        "libsqlite3-sys",
        "reqwest",
        "tokenizers",
        "parquet",
    ] {
        assert!(
            !crates.contains(&forbidden),
            "todoctl depends on {forbidden}:\n{tree}"
        );
    }
}
