//! The pod status cache: UID -> (value, modified time), a global timestamp,
//! and an index of waiters so an update wakes exactly the workers it satisfies.
//!
//! A waiter asks for data of one pod at least as new as `min`. It is satisfied
//! by a `set` of that pod with a time >= `min`, or by the global timestamp
//! reaching `min` (every pod is then known to be at least that fresh). Waiters
//! are found per UID (a short list) and through a min-heap on `min` for the
//! global case, so neither a `set` nor an `update_time` scans every entry or
//! every waiter. The value type is generic so the logic is tested without Python.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::workqueue::Time;

pub struct Entry<V> {
    pub value: V,
    pub modified: f64,
}

/// What a fresh read finds.
pub enum Fresh<'a, V> {
    /// The pod's own entry.
    Entry(&'a Entry<V>),
    /// No entry, but the global timestamp says "nothing is known": an empty status.
    Empty,
    /// Not fresh enough: the caller has to wait.
    Stale,
}

pub struct PodCache<V> {
    entries: HashMap<String, Entry<V>>,
    timestamp: Option<f64>,
    // uid -> [(waiter id, min time)]; usually zero or one waiter per pod.
    by_uid: HashMap<String, Vec<(u64, f64)>>,
    // Every live waiter: id -> (uid, min). Heap entries whose id is gone are stale.
    live: HashMap<u64, (String, f64)>,
    heap: BinaryHeap<Reverse<(Time, u64)>>,
    next_id: u64,
}

impl<V> Default for PodCache<V> {
    fn default() -> Self {
        PodCache {
            entries: HashMap::new(),
            timestamp: None,
            by_uid: HashMap::new(),
            live: HashMap::new(),
            heap: BinaryHeap::new(),
            next_id: 0,
        }
    }
}

impl<V> PodCache<V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, uid: &str) -> Option<&Entry<V>> {
        self.entries.get(uid)
    }

    pub fn timestamp(&self) -> Option<f64> {
        self.timestamp
    }

    pub fn fresh(&self, uid: &str, min: f64) -> Fresh<'_, V> {
        let e = self.entries.get(uid);
        if let Some(e) = e {
            if e.modified >= min {
                return Fresh::Entry(e);
            }
        }
        match self.timestamp {
            Some(ts) if ts >= min => match e {
                Some(e) => Fresh::Entry(e),
                None => Fresh::Empty,
            },
            _ => Fresh::Stale,
        }
    }

    /// Register a waiter; the id comes back from `set` or `update_time` when it is satisfied.
    pub fn add_waiter(&mut self, uid: &str, min: f64) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.by_uid
            .entry(uid.to_owned())
            .or_default()
            .push((id, min));
        self.live.insert(id, (uid.to_owned(), min));
        self.heap.push(Reverse((Time(min), id)));
        // Cancelled waiters leave heap entries behind; rebuild when they dominate.
        if self.heap.len() > 2 * self.live.len() + 64 {
            self.heap = self
                .live
                .iter()
                .map(|(&id, (_, m))| Reverse((Time(*m), id)))
                .collect();
        }
        id
    }

    /// Forget a waiter (cancelled, or already woken: then this is a no-op).
    pub fn remove_waiter(&mut self, id: u64) {
        if let Some((uid, _)) = self.live.remove(&id) {
            self.unlink(&uid, id);
        }
    }

    fn unlink(&mut self, uid: &str, id: u64) {
        if let Some(list) = self.by_uid.get_mut(uid) {
            list.retain(|&(w, _)| w != id);
            if list.is_empty() {
                self.by_uid.remove(uid);
            }
        }
    }

    /// Store a pod's value; returns the waiters this satisfies (they are removed).
    pub fn set(&mut self, uid: &str, value: V, modified: f64) -> Vec<u64> {
        self.entries
            .insert(uid.to_owned(), Entry { value, modified });
        let mut woken = Vec::new();
        if let Some(list) = self.by_uid.get_mut(uid) {
            list.retain(|&(id, min)| {
                if modified >= min {
                    woken.push(id);
                    false
                } else {
                    true
                }
            });
            if list.is_empty() {
                self.by_uid.remove(uid);
            }
        }
        for id in &woken {
            self.live.remove(id);
        }
        woken
    }

    pub fn delete(&mut self, uid: &str) -> Option<Entry<V>> {
        self.entries.remove(uid)
    }

    /// Move the global timestamp; returns (waiter id, uid) of every waiter it
    /// satisfies, in order of their min time. Cost: O(woken log n).
    pub fn update_time(&mut self, ts: f64) -> Vec<(u64, String)> {
        self.timestamp = Some(ts);
        let mut woken = Vec::new();
        while let Some(Reverse((Time(min), id))) = self.heap.peek() {
            if *min > ts {
                break;
            }
            let id = *id;
            self.heap.pop();
            if let Some((uid, _)) = self.live.remove(&id) {
                self.unlink(&uid, id);
                woken.push((id, uid));
            }
        }
        woken
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn waiting(&self) -> usize {
        self.live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_wakes_only_its_pod_and_only_when_new_enough() {
        let mut c: PodCache<u32> = PodCache::new();
        let a = c.add_waiter("a", 5.0);
        let b = c.add_waiter("b", 5.0);
        assert!(c.set("a", 1, 4.0).is_empty());
        assert_eq!(c.set("a", 2, 5.0), vec![a]);
        assert_eq!(c.waiting(), 1);
        assert!(matches!(c.fresh("a", 5.0), Fresh::Entry(e) if e.value == 2));
        assert!(matches!(c.fresh("b", 5.0), Fresh::Stale));
        c.remove_waiter(b);
        assert_eq!(c.waiting(), 0);
    }

    #[test]
    fn global_time_wakes_in_min_order_and_skips_removed() {
        let mut c: PodCache<u32> = PodCache::new();
        let w3 = c.add_waiter("x", 3.0);
        let w1 = c.add_waiter("y", 1.0);
        let w2 = c.add_waiter("z", 2.0);
        c.remove_waiter(w2);
        assert_eq!(c.update_time(0.5), vec![]);
        assert_eq!(
            c.update_time(3.0),
            vec![(w1, "y".to_owned()), (w3, "x".to_owned())]
        );
        assert!(matches!(c.fresh("nope", 3.0), Fresh::Empty));
        assert!(matches!(c.fresh("nope", 3.5), Fresh::Stale));
        assert_eq!(c.waiting(), 0);
    }

    #[test]
    fn old_entry_is_fresh_under_a_newer_global_time() {
        let mut c: PodCache<u32> = PodCache::new();
        c.set("a", 7, 1.0);
        c.update_time(10.0);
        assert!(matches!(c.fresh("a", 9.0), Fresh::Entry(e) if e.modified == 1.0));
        c.delete("a");
        assert!(matches!(c.fresh("a", 9.0), Fresh::Empty));
    }

    #[test]
    fn heap_is_compacted_after_many_cancellations() {
        let mut c: PodCache<u32> = PodCache::new();
        for i in 0..10_000 {
            let id = c.add_waiter("a", f64::from(i));
            c.remove_waiter(id);
        }
        assert!(c.heap.len() <= 64 + 1);
        assert_eq!(c.waiting(), 0);
    }
}
