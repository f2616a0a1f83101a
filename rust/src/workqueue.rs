//! The pod work queue: keys due at a time, taken in time order.
//!
//! A later enqueue of a key overwrites its time (the old heap entry becomes
//! stale and is skipped when it surfaces), so enqueue and get are O(log n)
//! and a get touches only due entries, however many are not yet due.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// An f64 with a total order, for heaps keyed by time.
#[derive(Clone, Copy, Debug)]
pub struct Time(pub f64);

impl PartialEq for Time {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Time {}

impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Time {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[derive(Default)]
pub struct WorkQueue {
    due: HashMap<String, (f64, u64)>,
    heap: BinaryHeap<Reverse<(Time, u64, String)>>,
    seq: u64,
}

impl WorkQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn enqueue_at(&mut self, key: &str, at: f64) {
        self.seq += 1;
        self.due.insert(key.to_owned(), (at, self.seq));
        self.heap
            .push(Reverse((Time(at), self.seq, key.to_owned())));
        if self.heap.len() > 2 * self.due.len() + 64 {
            self.compact();
        }
    }

    fn compact(&mut self) {
        self.heap = self
            .due
            .iter()
            .map(|(k, &(at, seq))| Reverse((Time(at), seq, k.clone())))
            .collect();
    }

    /// Every key due at `now`, earliest first (ties in enqueue order).
    pub fn get_work(&mut self, now: f64) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(Reverse((Time(at), seq, _))) = self.heap.peek() {
            if *at > now {
                break;
            }
            let (at, seq) = (*at, *seq);
            let Reverse((_, _, key)) = self.heap.pop().expect("peeked");
            if self.due.get(&key) == Some(&(at, seq)) {
                self.due.remove(&key);
                out.push(key);
            }
        }
        out
    }

    pub fn remove(&mut self, key: &str) {
        self.due.remove(key);
    }

    pub fn len(&self) -> usize {
        self.due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwrite_and_order() {
        let mut q = WorkQueue::new();
        q.enqueue_at("a", 5.0);
        q.enqueue_at("b", 1.0);
        q.enqueue_at("a", 0.5); // overwrites 5.0
        assert_eq!(q.get_work(0.1), Vec::<String>::new());
        assert_eq!(q.get_work(2.0), vec!["a", "b"]);
        assert_eq!(q.get_work(10.0), Vec::<String>::new()); // the stale a@5 is gone
        assert!(q.is_empty());
    }

    #[test]
    fn later_time_wins_too() {
        let mut q = WorkQueue::new();
        q.enqueue_at("a", 1.0);
        q.enqueue_at("a", 3.0);
        assert!(q.get_work(2.0).is_empty());
        assert_eq!(q.get_work(3.0), vec!["a"]);
    }

    #[test]
    fn remove_and_compaction() {
        let mut q = WorkQueue::new();
        for i in 0..1000 {
            q.enqueue_at("k", f64::from(i));
        }
        assert_eq!(q.len(), 1);
        q.remove("k");
        assert!(q.get_work(1e9).is_empty());
    }
}
