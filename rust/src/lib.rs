//! Python bindings for the kubelet's native hot paths.
//!
//! The logic lives in plain Rust modules with their own `cargo test`s; this
//! file only converts between Python and Rust types.

use pyo3::prelude::*;

/// Build profile, so benchmarks can refuse to measure a debug build.
pub const BUILD_PROFILE: &str = if cfg!(debug_assertions) { "debug" } else { "release" };

#[pymodule]
fn _kubelet_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("BUILD_PROFILE", BUILD_PROFILE)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn profile_is_known() {
        assert!(super::BUILD_PROFILE == "debug" || super::BUILD_PROFILE == "release");
    }
}
