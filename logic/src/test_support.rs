//! What unit tests share that is no module's own.

/// Whether this test may do what needs root (`what`: "mounting file systems"): true as
/// root; elsewhere false where `ENERGY_TESTS_ALLOW_SKIP` is set (the test is skipped), and
/// a failure otherwise, so that a run that could not test it never passes as if it had.
pub(crate) fn root_or_skip(what: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("ENERGY_TESTS_ALLOW_SKIP").is_some(),
        "{what} needs root (ENERGY_TESTS_ALLOW_SKIP=1 skips)"
    );
    false
}
