//! Python bindings for the kubelet's native hot paths.
//!
//! The logic lives in plain Rust modules with their own `cargo test`s; this
//! file only converts between Python and Rust types.

pub mod relist;
pub mod wire;
pub mod workqueue;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Build profile, so benchmarks can refuse to measure a debug build.
pub const BUILD_PROFILE: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

/// The relist differ: raw List responses in, (events, changed pod UIDs) out.
#[pyclass(name = "RelistDiffer", module = "kubelet_native")]
struct PyRelistDiffer {
    inner: relist::Differ,
    // The previous responses: items that did not change are found by comparing
    // bytes with these, without decoding them.
    prev: Option<(Py<PyBytes>, Py<PyBytes>)>,
}

#[pymethods]
impl PyRelistDiffer {
    #[new]
    fn new() -> Self {
        PyRelistDiffer {
            inner: relist::Differ::new(),
            prev: None,
        }
    }

    /// diff(sandboxes: bytes, containers: bytes) -> (list[(uid, type, id)], list[uid])
    #[allow(clippy::type_complexity)]
    fn diff(
        &mut self,
        py: Python<'_>,
        sandboxes: &Bound<'_, PyBytes>,
        containers: &Bound<'_, PyBytes>,
    ) -> PyResult<(Vec<(String, &'static str, String)>, Vec<String>)> {
        let (s, c) = (sandboxes.as_bytes(), containers.as_bytes());
        let (ps, pc): (&[u8], &[u8]) = match &self.prev {
            Some((ps, pc)) => (ps.as_bytes(py), pc.as_bytes(py)),
            None => (b"", b""),
        };
        let inner = &mut self.inner;
        // Decoding and diffing touch no Python object: let other threads run.
        let result = py.allow_threads(|| inner.diff_with_previous(s, c, ps, pc));
        let (events, changed) = result
            .map_err(|e| PyValueError::new_err(format!("undecodable relist response: {}", e.0)))?;
        // Keep these responses (a reference, not a copy) for the next diff.
        self.prev = Some((sandboxes.clone().unbind(), containers.clone().unbind()));
        Ok((
            events
                .into_iter()
                .map(|e| (e.pod_uid, e.kind.as_str(), e.id))
                .collect(),
            changed,
        ))
    }

    #[getter]
    fn running_pods(&self) -> usize {
        self.inner.running_pods
    }

    #[getter]
    fn running_containers(&self) -> usize {
        self.inner.running_containers
    }

    fn pod_ids(&self) -> Vec<String> {
        self.inner.pod_ids()
    }

    fn known(&self, uid: &str) -> bool {
        self.inner.known(uid)
    }
}

/// The pod work queue keyed by string, with times supplied by the caller.
#[pyclass(name = "WorkQueueCore", module = "kubelet_native")]
struct PyWorkQueue {
    inner: workqueue::WorkQueue,
}

#[pymethods]
impl PyWorkQueue {
    #[new]
    fn new() -> Self {
        PyWorkQueue {
            inner: workqueue::WorkQueue::new(),
        }
    }

    fn enqueue_at(&mut self, key: &str, at: f64) {
        self.inner.enqueue_at(key, at);
    }

    fn get_work(&mut self, now: f64) -> Vec<String> {
        self.inner.get_work(now)
    }

    fn remove(&mut self, key: &str) {
        self.inner.remove(key);
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

#[pymodule]
fn _kubelet_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("BUILD_PROFILE", BUILD_PROFILE)?;
    m.add_class::<PyRelistDiffer>()?;
    m.add_class::<PyWorkQueue>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn profile_is_known() {
        assert!(super::BUILD_PROFILE == "debug" || super::BUILD_PROFILE == "release");
    }
}
