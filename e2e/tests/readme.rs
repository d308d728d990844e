//! The README's first service builds as a crate of its own, from the README
//! alone: its `Cargo.toml` and `src/main.rs` blocks (each after an
//! `<!-- first-service: PATH -->` line) are written to
//! `target/readme-snippet/first-service`, with `leader-runtime` patched to
//! this workspace's and the workspace's `Cargo.lock` copied in (so nothing
//! is resolved again), and `cargo build --offline` must succeed there. Its
//! own target directory, `target/readme-snippet/target`, keeps reruns
//! incremental (a cold build compiles the dependencies once).
//!
//! Also: the README's `main.rs` is `examples/service.rs` after its header
//! (which `e2e/tests/service.rs` runs against Redis), and it is the README's
//! only Rust block, so every Rust line of the README is compiled.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const MARK: &str = "<!-- first-service: ";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The `(path, fenced block)` pairs marked in the README.
fn marked_blocks(readme: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix(MARK) else {
            continue;
        };
        let path = rest.strip_suffix(" -->").expect("mark ends with -->");
        let fence = lines.next().expect("a fenced block after the mark");
        assert!(fence.starts_with("```"), "no fenced block after {line}");
        let mut body = String::new();
        for line in lines.by_ref() {
            if line == "```" {
                break;
            }
            body.push_str(line);
            body.push('\n');
        }
        blocks.push((path.to_owned(), body));
    }
    blocks
}

fn readme() -> String {
    std::fs::read_to_string(workspace().join("README.md")).unwrap()
}

#[test]
fn the_readme_main_rs_is_examples_service_rs_and_its_only_rust_block() {
    let readme = readme();
    let blocks = marked_blocks(&readme);
    let main = &blocks
        .iter()
        .find(|(path, _)| path == "src/main.rs")
        .expect("a first-service src/main.rs block")
        .1;
    let example = std::fs::read_to_string(workspace().join("examples/service.rs")).unwrap();
    let program: String = example
        .lines()
        .skip_while(|l| l.starts_with("//!"))
        .skip(1) // the blank line after the header
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        main, &program,
        "README.md's first-service src/main.rs differs from examples/service.rs (after its header)"
    );
    let rust_blocks = readme.lines().filter(|l| l.starts_with("```rust")).count();
    assert_eq!(
        rust_blocks, 1,
        "README.md has Rust blocks besides the first service's: compile them in e2e/tests/readme.rs"
    );
}

#[test]
fn the_readme_first_service_builds_as_its_own_crate() {
    let root = workspace();
    let blocks = marked_blocks(&readme());
    let paths: Vec<&str> = blocks.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, ["Cargo.toml", "src/main.rs"], "marked README blocks");

    let dir = root.join("target/readme-snippet");
    let krate = dir.join("first-service");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    for (path, body) in &blocks {
        let mut text = body.clone();
        if path == "Cargo.toml" {
            // Outside this workspace; the runtime from this checkout.
            text.push_str(&format!(
                "\n[workspace]\n\n[patch.crates-io]\nleader-runtime = {{ path = {:?} }}\n",
                root.join("leader-runtime")
            ));
        }
        write_if_changed(&krate.join(path), &text);
    }
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap();
    write_if_changed(&krate.join("Cargo.lock"), &lock);

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let started = Instant::now();
    let out = Command::new(cargo)
        .args(["build", "--offline", "--quiet"])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .output()
        .expect("run cargo");
    println!(
        "cargo build of the README's first service: {:?}",
        started.elapsed()
    );
    assert!(
        out.status.success(),
        "the README's first service does not build ({}) in {}:\n{}{}",
        out.status,
        krate.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Leaves the file's modification time alone when its text is the same, so
/// cargo does not rebuild the crate on every run.
fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap();
    }
}
