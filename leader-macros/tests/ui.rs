//! Compile tests of `#[leader_only]`: what must compile (`leader-macros/tests/ui/pass`) and
//! the error each misuse reports (`leader-macros/tests/ui/fail`). See `e2e/tests/README.md`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
