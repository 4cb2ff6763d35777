//! dlock's one version: the crate's (Cargo.toml), shown by `MODULE LIST`
//! (as the integer Redis modules use), `COMMAND DOCS` (`since`) and
//! `INFO dlock` (`dlock_version`).

use std::ffi::CStr;

/// The crate version, e.g. `0.2.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// [`VERSION`] as a C string, for the module API.
pub const VERSION_C: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(version) => version,
        Err(_) => panic!("the crate version contains a NUL byte"),
    };

/// The version as `MODULE LIST` shows it: major * 10000 + minor * 100 +
/// patch (0.2.0 -> 200, 1.4.12 -> 10412), the encoding of Redis's own
/// modules.
pub const MODULE_VERSION: i32 = module_version(
    env!("CARGO_PKG_VERSION_MAJOR"),
    env!("CARGO_PKG_VERSION_MINOR"),
    env!("CARGO_PKG_VERSION_PATCH"),
);

const fn module_version(major: &str, minor: &str, patch: &str) -> i32 {
    let (major, minor, patch) = (number(major), number(minor), number(patch));
    assert!(
        minor < 100 && patch < 100,
        "minor and patch must be below 100"
    );
    major * 10_000 + minor * 100 + patch
}

const fn number(digits: &str) -> i32 {
    let bytes = digits.as_bytes();
    assert!(!bytes.is_empty(), "a version part is empty");
    let mut value = 0i32;
    let mut i = 0;
    while i < bytes.len() {
        assert!(bytes[i].is_ascii_digit(), "a version part is not a number");
        value = value * 10 + (bytes[i] - b'0') as i32;
        i += 1;
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_version_encodes_major_minor_patch() {
        assert_eq!(module_version("0", "2", "0"), 200);
        assert_eq!(module_version("1", "4", "12"), 10412);
        assert_eq!(module_version("0", "1", "0"), 100);
        let parts: Vec<i32> = VERSION.split('.').map(|p| p.parse().unwrap()).collect();
        assert_eq!(
            MODULE_VERSION,
            parts[0] * 10_000 + parts[1] * 100 + parts[2]
        );
        assert_eq!(VERSION_C.to_str().unwrap(), VERSION);
    }
}
