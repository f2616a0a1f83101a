//! A rate-limited work queue with the semantics of client-go's
//! workqueue.RateLimitingInterface (queue + delaying queue + per-item
//! exponential failure backoff), with time supplied by the caller.
//!
//! - `add`: a key waits in the queue at most once (the dirty set); a key being
//!   processed is not handed out again, it is re-queued by `done` instead.
//! - `add_after`: the key joins the queue when its time comes; a second
//!   add_after only moves that time earlier, as client-go's waiting loop does.
//! - `add_rate_limited`: add_after with base * 2^failures, capped; `forget`
//!   resets the failures.
//! - `shut_down`: adds are ignored; keys already queued are still handed out.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};

use crate::workqueue::Time;

pub struct RateLimitingQueue {
    queue: VecDeque<String>,
    dirty: HashSet<String>,
    processing: HashSet<String>,
    // Delayed keys: key -> (ready time, seq); heap entries not matching are stale.
    waiting: HashMap<String, (f64, u64)>,
    heap: BinaryHeap<Reverse<(Time, u64, String)>>,
    seq: u64,
    failures: HashMap<String, u32>,
    base: f64,
    cap: f64,
    shutting_down: bool,
}

impl RateLimitingQueue {
    /// base and cap are the backoff bounds in seconds (client-go's default
    /// controller limiter uses 5 ms and 1000 s).
    pub fn new(base: f64, cap: f64) -> Self {
        RateLimitingQueue {
            queue: VecDeque::new(),
            dirty: HashSet::new(),
            processing: HashSet::new(),
            waiting: HashMap::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            failures: HashMap::new(),
            base,
            cap,
            shutting_down: false,
        }
    }

    pub fn add(&mut self, key: &str) {
        if self.shutting_down || self.dirty.contains(key) {
            return;
        }
        self.dirty.insert(key.to_owned());
        if !self.processing.contains(key) {
            self.queue.push_back(key.to_owned());
        }
    }

    pub fn add_after(&mut self, key: &str, delay: f64, now: f64) {
        if self.shutting_down {
            return;
        }
        if delay <= 0.0 {
            self.add(key);
            return;
        }
        let at = now + delay;
        if let Some(&(t, _)) = self.waiting.get(key) {
            if t <= at {
                return;
            }
        }
        self.seq += 1;
        self.waiting.insert(key.to_owned(), (at, self.seq));
        self.heap
            .push(Reverse((Time(at), self.seq, key.to_owned())));
        if self.heap.len() > 2 * self.waiting.len() + 64 {
            self.heap = self
                .waiting
                .iter()
                .map(|(k, &(t, s))| Reverse((Time(t), s, k.clone())))
                .collect();
        }
    }

    /// The backoff for the next retry of `key` (and count the failure).
    pub fn when(&mut self, key: &str) -> f64 {
        let n = self.failures.entry(key.to_owned()).or_insert(0);
        let exp = *n;
        *n = n.saturating_add(1);
        // 2^exp overflows f64 only past 1023; the cap applies long before.
        let backoff = self.base * 2f64.powi(exp.min(1023) as i32);
        if backoff.is_finite() && backoff < self.cap {
            backoff
        } else {
            self.cap
        }
    }

    pub fn add_rate_limited(&mut self, key: &str, now: f64) {
        let d = self.when(key);
        self.add_after(key, d, now);
    }

    pub fn forget(&mut self, key: &str) {
        self.failures.remove(key);
    }

    pub fn num_requeues(&self, key: &str) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    /// Move delayed keys whose time has come into the queue, earliest first.
    pub fn promote(&mut self, now: f64) {
        while let Some(Reverse((Time(at), _, _))) = self.heap.peek() {
            if *at > now {
                break;
            }
            let Reverse((Time(at), seq, key)) = self.heap.pop().expect("peeked");
            if self.waiting.get(&key) == Some(&(at, seq)) {
                self.waiting.remove(&key);
                self.add(&key);
            }
        }
    }

    /// The next key to process, or None when nothing is ready.
    pub fn get(&mut self, now: f64) -> Option<String> {
        self.promote(now);
        let key = self.queue.pop_front()?;
        self.dirty.remove(&key);
        self.processing.insert(key.clone());
        Some(key)
    }

    pub fn done(&mut self, key: &str) {
        self.processing.remove(key);
        if self.dirty.contains(key) {
            self.queue.push_back(key.to_owned());
        }
    }

    /// When the earliest delayed key becomes ready (for a sleeping getter).
    pub fn next_ready(&self) -> Option<f64> {
        // Stale heap tops are harmless here: waking early just finds nothing.
        self.heap.peek().map(|Reverse((Time(t), _, _))| *t)
    }

    pub fn shut_down(&mut self) {
        self.shutting_down = true;
        self.waiting.clear();
        self.heap.clear();
    }

    pub fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Keys ready to be handed out (client-go's Len).
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn waiting_len(&self) -> usize {
        self.waiting.len()
    }

    pub fn processing_len(&self) -> usize {
        self.processing.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_and_processing() {
        let mut q = RateLimitingQueue::new(0.005, 1000.0);
        q.add("a");
        q.add("a");
        assert_eq!(q.len(), 1);
        assert_eq!(q.get(0.0).as_deref(), Some("a"));
        q.add("a"); // while processing: not handed out again
        assert_eq!(q.get(0.0), None);
        q.done("a");
        assert_eq!(q.get(0.0).as_deref(), Some("a"));
        q.done("a");
        assert_eq!(q.get(0.0), None);
    }

    #[test]
    fn add_after_keeps_the_earliest_time() {
        let mut q = RateLimitingQueue::new(0.005, 1000.0);
        q.add_after("a", 5.0, 0.0);
        q.add_after("a", 10.0, 0.0);
        q.add_after("b", 1.0, 0.0);
        assert_eq!(q.next_ready(), Some(1.0));
        assert_eq!(q.get(0.9), None);
        assert_eq!(q.get(5.0).as_deref(), Some("b"));
        assert_eq!(q.get(5.0).as_deref(), Some("a"));
        assert_eq!(q.get(100.0), None);
    }

    #[test]
    fn exponential_backoff_capped_and_forget() {
        let mut q = RateLimitingQueue::new(1.0, 5.0);
        let d: Vec<f64> = (0..5).map(|_| q.when("a")).collect();
        assert_eq!(d, vec![1.0, 2.0, 4.0, 5.0, 5.0]);
        assert_eq!(q.num_requeues("a"), 5);
        q.forget("a");
        assert_eq!(q.when("a"), 1.0);
        for _ in 0..5000 {
            q.when("b");
        }
        assert_eq!(q.when("b"), 5.0);
    }

    #[test]
    fn shutdown_drains_and_ignores_adds() {
        let mut q = RateLimitingQueue::new(0.005, 1000.0);
        q.add("a");
        q.add_after("b", 1.0, 0.0);
        q.shut_down();
        q.add("c");
        assert_eq!(q.get(10.0).as_deref(), Some("a"));
        assert_eq!(q.get(10.0), None);
        assert!(q.shutting_down());
    }
}
