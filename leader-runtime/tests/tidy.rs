//! Checks of the source tree itself, in the manner of rust-analyzer's
//! `xtask/src/tidy.rs`: the layering of `src/` that ARCHITECTURE.md states,
//! and no figures or dated history in comments and API docs.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, lowest layer first: a module uses only
/// modules before it (outside its tests). `lib.rs` sits above them all.
/// Keep in step with `mod` order in `lib.rs` and with ARCHITECTURE.md.
const LAYERS: &[&str] = &[
    "util", "error", "names", "backend", "observe", "group", "config", "election", "runtime",
    "gate", "fence", "once", "cron", "admin",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Test code: files of tests, and the shared test helpers.
fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name == "test_support.rs"
        || name == "scenarios.rs"
}

/// `path`'s top-level module: `src/x.rs` or `src/x/…` is `x`.
fn top_module(path: &Path) -> String {
    let rel = path.strip_prefix(src()).expect("a file under src/");
    let first = rel.components().next().expect("a component");
    let first = first.as_os_str().to_str().expect("a UTF-8 name");
    first.strip_suffix(".rs").unwrap_or(first).to_owned()
}

/// The code of `text` without comments and without items under
/// `#[cfg(test)]` (a line `#[cfg(test)]`, then one item: up to its `;` or
/// its closing brace).
fn code_lines(text: &str) -> Vec<(usize, String)> {
    non_test_lines(text, false)
}

/// The lines of `text` outside items under `#[cfg(test)]`, with or without
/// its comment lines.
fn non_test_lines(text: &str, keep_comments: bool) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") && !keep_comments {
            continue;
        }
        if trimmed == "#[cfg(test)]" {
            let mut depth = 0i32;
            let mut opened = false;
            for (_, item) in lines.by_ref() {
                let item = item.trim_start();
                if item.starts_with("//") || item.starts_with("#[") {
                    continue;
                }
                depth += item.matches('{').count() as i32;
                opened |= item.contains('{');
                depth -= item.matches('}').count() as i32;
                if (opened && depth <= 0) || (!opened && item.ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        out.push((n + 1, line.to_owned()));
    }
    out
}

/// The first segments of every `crate::` path on `line`: `crate::a::b` and
/// `crate::{a, b::c}` name `a` (and `b`).
fn crate_paths(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::` or `my_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut start = true;
            let mut ident = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                if depth == 1 && c == ',' {
                    if !ident.is_empty() {
                        found.push(std::mem::take(&mut ident));
                    }
                    start = true;
                    continue;
                }
                if start && depth == 1 {
                    if c.is_alphanumeric() || c == '_' {
                        ident.push(c);
                    } else if !ident.is_empty() {
                        found.push(std::mem::take(&mut ident));
                        start = false;
                    }
                }
            }
            if !ident.is_empty() {
                found.push(ident);
            }
        } else {
            let ident: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !ident.is_empty() {
                found.push(ident);
            }
        }
    }
    found
}

/// The names `lib.rs` re-exports at the root, each with the module it
/// comes from; and the root's own functions (mapped to `lib.rs`).
fn root_names() -> HashMap<String, String> {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let mut names = HashMap::new();
    for (_, line) in code_lines(&lib) {
        let line = line.trim();
        for prefix in ["pub async fn ", "pub fn "] {
            if let Some(rest) = line.strip_prefix(prefix) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name, "lib.rs".to_owned());
            }
        }
    }
    // `pub use crate::m::…::{A, B};` may span lines.
    let mut text = lib.as_str();
    while let Some(at) = text.find("pub use crate::") {
        text = &text[at + "pub use crate::".len()..];
        let end = text.find(';').expect("a `;` after `pub use`");
        let item = &text[..end];
        let module: String = item
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let last = item.rsplit("::").next().unwrap_or("");
        for name in last.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = name.split(" as ").last().unwrap_or("").trim();
            if !name.is_empty() {
                names.insert(name.to_owned(), module.clone());
            }
        }
    }
    names.insert("__private".to_owned(), "lib.rs".to_owned());
    names
}

#[test]
fn lib_declares_the_layers_in_order() {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let declared: Vec<String> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .filter(|m| m != "test_support")
        .collect();
    assert_eq!(
        declared, LAYERS,
        "lib.rs must declare the top-level modules in layering order (tests/tidy.rs `LAYERS`, ARCHITECTURE.md)"
    );
}

#[test]
fn lower_layers_do_not_use_higher_ones() {
    let rank: HashMap<&str, usize> = LAYERS.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let roots = root_names();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut problems = Vec::new();
    for path in files.iter().filter(|p| !is_test_file(p)) {
        let module = top_module(path);
        if module == "lib" {
            continue;
        }
        let Some(&own) = rank.get(module.as_str()) else {
            problems.push(format!(
                "{}: top-level module `{module}` is not in tests/tidy.rs `LAYERS`",
                path.display()
            ));
            continue;
        };
        let text = fs::read_to_string(path).expect("a source file");
        for (n, line) in code_lines(&text) {
            for first in crate_paths(&line) {
                let target = if rank.contains_key(first.as_str()) {
                    first.clone()
                } else if let Some(m) = roots.get(&first) {
                    m.clone()
                } else {
                    problems.push(format!(
                        "{}:{n}: `crate::{first}` is neither a top-level module nor a root re-export",
                        path.display()
                    ));
                    continue;
                };
                if target == module {
                    continue;
                }
                let allowed = rank.get(target.as_str()).is_some_and(|&t| t < own);
                if !allowed {
                    problems.push(format!(
                        "{}:{n}: `{module}` uses `crate::{first}` (from `{target}`), which is not below it: {}",
                        path.display(),
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "imports against the layering (lowest first: {}):\n{}",
        LAYERS.join(" < "),
        problems.join("\n")
    );
}

/// A calendar date, `20YY-MM-DD`, not the start of a timestamp
/// (`2024-05-01T00:00:00Z` is a value in an example, not a history mark).
fn has_date(line: &str) -> bool {
    let b = line.as_bytes();
    (0..b.len().saturating_sub(9)).any(|i| {
        let d = |j: usize| b[i + j].is_ascii_digit();
        b[i] == b'2'
            && b[i + 1] == b'0'
            && d(2)
            && d(3)
            && b[i + 4] == b'-'
            && d(5)
            && d(6)
            && b[i + 7] == b'-'
            && d(8)
            && d(9)
            && b.get(i + 10) != Some(&b'T')
            && (i == 0 || !b[i - 1].is_ascii_digit())
    })
}

/// A measured percentile (`p50`, `p99`, `p999`, `ms p99`).
fn has_percentile(line: &str) -> bool {
    let b = line.as_bytes();
    (0..b.len()).any(|i| {
        b[i] == b'p'
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric())
            && b.get(i + 1).is_some_and(u8::is_ascii_digit)
            && b.get(i + 2).is_some_and(u8::is_ascii_digit)
            && !b.get(i + 3).is_some_and(u8::is_ascii_alphabetic)
    })
}

#[test]
fn comments_and_docs_hold_no_figures_or_dates() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut problems = Vec::new();
    for path in files.iter().filter(|p| !is_test_file(p)) {
        let text = fs::read_to_string(path).expect("a source file");
        for (n, line) in non_test_lines(&text, true) {
            let Some(at) = line.find("//") else { continue };
            let comment = &line[at..];
            if has_date(comment) {
                problems.push(format!("{}:{n}: a date: {}", path.display(), line.trim()));
            }
            if has_percentile(comment) {
                problems.push(format!(
                    "{}:{n}: a measured figure: {}",
                    path.display(),
                    line.trim()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "comments and API docs say what the code does, not what it measured or when \
         (figures belong in BENCHMARKS.md, history in git):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_look_for() {
    assert!(has_date("// fixed 2026-12-04"));
    assert!(!has_date("//! \"2024-05-01T00:00:00Z\""));
    assert!(has_percentile("/// 101 ms p99 after the expiry"));
    assert!(!has_percentile("// http2 and pid"));
    assert_eq!(
        crate_paths("use crate::{a, b::{c, d}, E};"),
        ["a", "b", "E"]
    );
    assert_eq!(crate_paths("x = crate::util::clock::now();"), ["util"]);
    assert_eq!(crate_paths("$crate::x"), Vec::<String>::new());
    let code =
        code_lines("use a;\n#[cfg(test)]\nmod tests {\n    use crate::z;\n}\n// crate::y\nuse b;");
    let kept: Vec<&str> = code.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(kept, ["use a;", "use b;"]);
    // Comments of test modules may name the dates their cases are about.
    let comments = non_test_lines(
        "// a\n#[cfg(test)]\nmod tests {\n    // 2026-03-29 at 02:00\n}",
        true,
    );
    assert_eq!(comments, [(1, "// a".to_owned())]);
}
