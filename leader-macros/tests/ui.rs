//! Compile tests of `#[leader_only]`: what must compile (`leader-macros/tests/ui/pass`) and
//! the error each misuse reports (`leader-macros/tests/ui/fail`). See `e2e/tests/README.md`.

#[test]
fn ui() {
    build_dependencies_once();
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}

/// Almost all of this test's time is trybuild building the tests' dependencies (the runtime,
/// redis, tokio) in its own target directory, `target/tests/trybuild`; the 52 files themselves
/// take about 10 s. trybuild 1.0.122 builds those dependencies twice: first with its rustflags
/// (`--cfg trybuild --verbose -A dead_code`, `src/rustflags.rs`), then, for the tests, with
/// `--diagnostic-width=140` added (`cargo::build_test`), and a change of rustflags rebuilds
/// every crate. `CARGO_ENCODED_RUSTFLAGS`, which cargo prefers to the `build.rustflags` and
/// `target.<triple>.rustflags` that trybuild passes with `--config` (trybuild removes only
/// `RUSTFLAGS`), gives both builds the tests' flags, so the dependencies build once; and without
/// debug info, which nothing here reads, they build faster. On 2 cores: about 44 s instead of
/// 96-155 s. The flags are trybuild's own for its test builds, so the diagnostics compared with
/// the `.stderr` files are the same. Left alone when the caller set rustflags of its own
/// (trybuild then keeps what it honours of them, e.g. `-C instrument-coverage`) or the debug
/// setting.
fn build_dependencies_once() {
    let set = |name: &str| std::env::var_os(name).is_some();
    if !set("RUSTFLAGS") && !set("CARGO_ENCODED_RUSTFLAGS") {
        let flags = [
            "--cfg",
            "trybuild",
            "--verbose",
            "-A",
            "dead_code",
            "--diagnostic-width=140",
        ];
        std::env::set_var("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"));
    }
    if !set("CARGO_PROFILE_DEV_DEBUG") {
        std::env::set_var("CARGO_PROFILE_DEV_DEBUG", "0");
    }
}
