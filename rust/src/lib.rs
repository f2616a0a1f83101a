//! Python bindings for the kubelet's native hot paths.
//!
//! The logic lives in plain Rust modules with their own `cargo test`s; this
//! file only converts between Python and Rust types.

pub mod fnv;
pub mod podcache;
pub mod ratelimiting;
pub mod relist;
pub mod wire;
pub mod workqueue;

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

/// Times and delays from Python: NaN has no place in a time order (a heap
/// entry at NaN would never match its key again), so it is a ValueError here
/// rather than a silent loss or a panic further in.
fn time_arg(name: &str, v: f64) -> PyResult<f64> {
    if v.is_nan() {
        return Err(PyValueError::new_err(format!(
            "{name} must be a number, not NaN"
        )));
    }
    Ok(v)
}

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

    #[getter]
    fn exited_containers(&self) -> usize {
        self.inner.exited_containers
    }

    #[getter]
    fn changes(&self) -> u64 {
        self.inner.changes
    }

    fn pod_ids(&self) -> Vec<String> {
        self.inner.pod_ids()
    }

    fn known(&self, uid: &str) -> bool {
        self.inner.known(uid)
    }
}

/// container_ids(raw: bytes) -> list[str]: the IDs of a raw ListContainersResponse,
/// in order, without building a protobuf message per container.
#[pyfunction]
fn container_ids<'py>(py: Python<'py>, raw: &Bound<'py, PyBytes>) -> PyResult<Bound<'py, PyList>> {
    let buf = raw.as_bytes();
    // Parsing touches no Python object; only the str objects need the GIL.
    let ids = py.allow_threads(|| wire::container_ids(buf)).map_err(|e| {
        PyValueError::new_err(format!("undecodable ListContainersResponse: {}", e.0))
    })?;
    PyList::new(py, ids)
}

/// fnv32a(data: bytes) -> int: FNV-1a 32 of the bytes (checkpoint checksums).
#[pyfunction]
fn fnv32a(py: Python<'_>, data: &Bound<'_, PyBytes>) -> u32 {
    let buf = data.as_bytes();
    py.allow_threads(|| fnv::fnv32a(buf))
}

/// The pod work queue keyed by string, with times supplied by the caller.
/// Thread-safe: the queue sits behind a mutex; get_work pops due keys with the
/// GIL released.
#[pyclass(name = "WorkQueueCore", module = "kubelet_native", frozen)]
struct PyWorkQueue {
    inner: Mutex<workqueue::WorkQueue>,
}

impl PyWorkQueue {
    fn lock(&self) -> MutexGuard<'_, workqueue::WorkQueue> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl PyWorkQueue {
    #[new]
    fn new() -> Self {
        PyWorkQueue {
            inner: Mutex::new(workqueue::WorkQueue::new()),
        }
    }

    fn enqueue_at(&self, key: &str, at: f64) -> PyResult<()> {
        self.lock().enqueue_at(key, time_arg("at", at)?);
        Ok(())
    }

    fn get_work(&self, py: Python<'_>, now: f64) -> PyResult<Vec<String>> {
        let now = time_arg("now", now)?;
        Ok(py.allow_threads(|| self.lock().get_work(now)))
    }

    fn remove(&self, key: &str) {
        self.lock().remove(key);
    }

    fn __len__(&self) -> usize {
        self.lock().len()
    }
}

/// The pod cache's store and waiter index; the asyncio futures stay in Python,
/// keyed by the waiter ids this hands out.
#[pyclass(name = "PodCacheCore", module = "kubelet_native")]
struct PyPodCache {
    inner: podcache::PodCache<(PyObject, PyObject)>,
}

#[pymethods]
impl PyPodCache {
    #[new]
    fn new() -> Self {
        PyPodCache {
            inner: podcache::PodCache::new(),
        }
    }

    /// (status, error, modified) or None.
    fn get(&self, py: Python<'_>, uid: &str) -> Option<(PyObject, PyObject, f64)> {
        self.inner
            .get(uid)
            .map(|e| (e.value.0.clone_ref(py), e.value.1.clone_ref(py), e.modified))
    }

    /// None when stale; (True, status, error) for the pod's entry; (False, None, None)
    /// when the global time makes an unknown pod's empty status fresh.
    #[allow(clippy::type_complexity)]
    fn fresh(
        &self,
        py: Python<'_>,
        uid: &str,
        min_time: f64,
    ) -> PyResult<Option<(bool, PyObject, PyObject)>> {
        Ok(
            match self.inner.fresh(uid, time_arg("min_time", min_time)?) {
                podcache::Fresh::Entry(e) => {
                    Some((true, e.value.0.clone_ref(py), e.value.1.clone_ref(py)))
                }
                podcache::Fresh::Empty => Some((false, py.None(), py.None())),
                podcache::Fresh::Stale => None,
            },
        )
    }

    fn add_waiter(&mut self, uid: &str, min_time: f64) -> PyResult<u64> {
        Ok(self.inner.add_waiter(uid, time_arg("min_time", min_time)?))
    }

    fn remove_waiter(&mut self, id: u64) {
        self.inner.remove_waiter(id);
    }

    /// Store; returns the ids of the waiters this satisfies.
    fn set(
        &mut self,
        uid: &str,
        status: PyObject,
        error: PyObject,
        modified: f64,
    ) -> PyResult<Vec<u64>> {
        let modified = time_arg("modified", modified)?;
        Ok(self.inner.set(uid, (status, error), modified))
    }

    fn delete(&mut self, uid: &str) {
        self.inner.delete(uid);
    }

    /// Move the global time; returns (waiter id, uid) of the waiters it satisfies.
    fn update_time(&mut self, ts: f64) -> PyResult<Vec<(u64, String)>> {
        Ok(self.inner.update_time(time_arg("ts", ts)?))
    }

    #[getter]
    fn timestamp(&self) -> Option<f64> {
        self.inner.timestamp()
    }

    fn waiting(&self) -> usize {
        self.inner.waiting()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

/// client-go's rate-limited queue. Thread-safe: the state sits behind a mutex,
/// and a blocking get waits on a condition variable with the GIL released.
#[pyclass(name = "RateLimitingQueueCore", module = "kubelet_native", frozen)]
struct PyRateLimitingQueue {
    inner: Mutex<ratelimiting::RateLimitingQueue>,
    cond: Condvar,
}

impl PyRateLimitingQueue {
    fn lock(&self) -> MutexGuard<'_, ratelimiting::RateLimitingQueue> {
        // A panic while holding the lock cannot leave the queue half-updated
        // in a way that matters more than losing the process; keep going.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl PyRateLimitingQueue {
    #[new]
    #[pyo3(signature = (base=0.005, cap=1000.0))]
    fn new(base: f64, cap: f64) -> PyResult<Self> {
        if !(base > 0.0 && cap >= base) {
            return Err(PyValueError::new_err("need 0 < base <= cap"));
        }
        Ok(PyRateLimitingQueue {
            inner: Mutex::new(ratelimiting::RateLimitingQueue::new(base, cap)),
            cond: Condvar::new(),
        })
    }

    fn add(&self, key: &str) {
        self.lock().add(key);
        self.cond.notify_one();
    }

    fn add_after(&self, key: &str, delay: f64, now: f64) -> PyResult<()> {
        let (delay, now) = (time_arg("delay", delay)?, time_arg("now", now)?);
        self.lock().add_after(key, delay, now);
        // A sleeping getter may need to wake earlier than it planned.
        self.cond.notify_all();
        Ok(())
    }

    fn add_rate_limited(&self, key: &str, now: f64) -> PyResult<()> {
        let now = time_arg("now", now)?;
        self.lock().add_rate_limited(key, now);
        self.cond.notify_all();
        Ok(())
    }

    fn when(&self, key: &str) -> f64 {
        self.lock().when(key)
    }

    fn forget(&self, key: &str) {
        self.lock().forget(key);
    }

    fn num_requeues(&self, key: &str) -> u32 {
        self.lock().num_requeues(key)
    }

    fn get_nowait(&self, now: f64) -> PyResult<Option<String>> {
        Ok(self.lock().get(time_arg("now", now)?))
    }

    /// Wait (GIL released) until a key is ready, the queue shuts down, or the
    /// timeout passes. `now` is the caller's clock at the call; it advances
    /// with the real time spent waiting.
    #[pyo3(signature = (now, timeout=None))]
    fn get(&self, py: Python<'_>, now: f64, timeout: Option<f64>) -> PyResult<Option<String>> {
        let now = time_arg("now", now)?;
        if let Some(t) = timeout {
            time_arg("timeout", t)?;
        }
        Ok(py.allow_threads(|| {
            let start = Instant::now();
            let mut q = self.lock();
            loop {
                let elapsed = start.elapsed().as_secs_f64();
                let t = now + elapsed;
                if let Some(k) = q.get(t) {
                    return Some(k);
                }
                if q.shutting_down() {
                    return None;
                }
                let mut wait = q.next_ready().map(|r| (r - t).max(0.0));
                if let Some(limit) = timeout {
                    let left = limit - elapsed;
                    if left <= 0.0 {
                        return None;
                    }
                    wait = Some(wait.map_or(left, |w| w.min(left)));
                }
                // A wait too long for a Duration (an infinite timeout or delay)
                // is a wait without a deadline.
                q = match wait.and_then(|w| Duration::try_from_secs_f64(w + 1e-4).ok()) {
                    Some(d) => {
                        self.cond
                            .wait_timeout(q, d)
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    }
                    None => self.cond.wait(q).unwrap_or_else(|p| p.into_inner()),
                };
            }
        }))
    }

    fn done(&self, key: &str) {
        self.lock().done(key);
        self.cond.notify_one();
    }

    fn next_ready(&self) -> Option<f64> {
        self.lock().next_ready()
    }

    fn shut_down(&self) {
        self.lock().shut_down();
        self.cond.notify_all();
    }

    #[getter]
    fn shutting_down(&self) -> bool {
        self.lock().shutting_down()
    }

    fn waiting_len(&self) -> usize {
        self.lock().waiting_len()
    }

    fn processing_len(&self) -> usize {
        self.lock().processing_len()
    }

    fn __len__(&self) -> usize {
        self.lock().len()
    }
}

#[pymodule]
fn _kubelet_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("BUILD_PROFILE", BUILD_PROFILE)?;
    m.add_class::<PyRelistDiffer>()?;
    m.add_class::<PyWorkQueue>()?;
    m.add_class::<PyPodCache>()?;
    m.add_class::<PyRateLimitingQueue>()?;
    m.add_function(wrap_pyfunction!(container_ids, m)?)?;
    m.add_function(wrap_pyfunction!(fnv32a, m)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn profile_is_known() {
        assert!(super::BUILD_PROFILE == "debug" || super::BUILD_PROFILE == "release");
    }
}
