//! Compile tests of `#[leader_only]`: what must compile (`tests/ui/pass`) and
//! the error each misuse reports (`tests/ui/fail`). See `tests/README.md`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
