//! libfaketime, preloaded into a service binary to move its wall clock by a fixed offset
//! (the clock-skew test runs executors minutes ahead of and behind the database).
//!
//! The library comes from PyPI: the `libfaketime` wheel (python-libfaketime) ships a
//! compiled `libfaketime.so.1`, and scripts/python-tools.sh installs it into
//! target/pytools with the other Python tools. `OPGATE_LIBFAKETIME` names another copy
//! (Debian's `libfaketime` package, say).

use std::path::PathBuf;

/// Overrides where the library is looked for.
pub const LIBRARY_ENV: &str = "OPGATE_LIBFAKETIME";

/// The virtualenv scripts/python-tools.sh installs into.
const PYTOOLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/pytools");
/// Where the wheel puts the library inside site-packages.
const IN_SITE_PACKAGES: &str = "libfaketime/vendor/libfaketime/src/libfaketime.so.1";

/// The library: `$OPGATE_LIBFAKETIME`, else the wheel's copy in
/// `target/pytools/lib/python3.*/site-packages`.
pub fn library() -> PathBuf {
    if let Some(path) = std::env::var_os(LIBRARY_ENV) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{LIBRARY_ENV}={} is not a file",
            path.display()
        );
        return path;
    }
    let lib = PathBuf::from(PYTOOLS).join("lib");
    std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .flatten()
        .map(|python| python.path().join("site-packages").join(IN_SITE_PACKAGES))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime is not installed under {}: run scripts/python-tools.sh (make \
                 test does), or set {LIBRARY_ENV} to a libfaketime.so.1",
                lib.display()
            )
        })
}

/// The environment that runs a process with its wall clock `offset` away from the real
/// one: libfaketime's syntax, `+10m`, `-10m`, `+90s`. The monotonic clock is left
/// alone: only the time of day is skewed, as when hosts' clocks disagree.
pub fn skewed_clock(offset: &str) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), library().display().to_string()),
        ("FAKETIME".into(), offset.into()),
        ("DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}
