//! The PLEG relist diff (the Go GenericPLEG's computeEvents), on raw CRI bytes.
//!
//! The previous relist stays here: each container or sandbox ID maps to its
//! pod UID and PLEG state. A relist walks the new responses in place; an entry
//! whose state did not change costs one hash lookup and no allocation.

use std::collections::HashMap;

use crate::wire::{self, DecodeError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Running,
    Exited,
    Unknown,
    NonExistent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EventType {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
    ContainerChanged,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::ContainerStarted => "ContainerStarted",
            EventType::ContainerDied => "ContainerDied",
            EventType::ContainerRemoved => "ContainerRemoved",
            EventType::ContainerChanged => "ContainerChanged",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub pod_uid: String,
    pub kind: EventType,
    pub id: String,
}

struct Record {
    id: String,
    uid: String,
    state: State,
    seen: u64, // the relist generation that last saw it
    live: bool,
}

/// Where each item of the previous response was, and which record it became.
#[derive(Default)]
struct Layout {
    heads: Vec<usize>,          // where each item's tag starts
    spans: Vec<(usize, usize)>, // each item's message bytes
    slots: Vec<u32>,
}

#[derive(Default)]
pub struct Differ {
    records: Vec<Record>, // a slab: `free` holds the unused slots
    free: Vec<u32>,
    index: HashMap<String, u32>, // ID -> slot
    pods: HashMap<String, u32>,  // pod UID -> how many records it has
    prev_sandboxes: Layout,
    prev_containers: Layout,
    generation: u64,
    pub running_pods: usize,
    pub running_containers: usize,
    pub exited_containers: usize,
    /// How many diffs produced events: unchanged while no container or sandbox
    /// appeared, changed state or vanished (so the set of pod IDs is the same).
    pub changes: u64,
}

fn container_state(cri: u64) -> State {
    match cri {
        1 => State::Running,
        2 => State::Exited,
        _ => State::Unknown, // CREATED (0), UNKNOWN (3) and anything newer
    }
}

/// The events for one ID going from `old` to `new`, as upstream generateEvents.
fn transition(old: State, new: State) -> &'static [EventType] {
    use EventType::*;
    if old == new {
        return &[];
    }
    match new {
        State::Running => &[ContainerStarted],
        State::Exited => &[ContainerDied],
        State::Unknown => &[ContainerChanged],
        State::NonExistent => {
            if old == State::Exited {
                &[ContainerRemoved]
            } else {
                &[ContainerDied, ContainerRemoved]
            }
        }
    }
}

/// A parsed item, or the slot of a byte-identical item in the previous relist.
enum Item<'a> {
    Same(u32),
    New(&'a str, &'a str, State),
}

impl Differ {
    pub fn new() -> Self {
        Self::default()
    }

    /// Diff a new relist against the previous one. `prev_*` must be the buffers
    /// given to the previous call (or empty): items that are byte-for-byte the
    /// same at the same position are known unchanged without being decoded.
    /// Events are ordered by pod UID, then ID; `changed` lists the pods with
    /// events in that order.
    pub fn diff_with_previous(
        &mut self,
        sandboxes: &[u8],
        containers: &[u8],
        prev_sandboxes: &[u8],
        prev_containers: &[u8],
    ) -> Result<(Vec<Event>, Vec<String>), DecodeError> {
        // Decode fully before touching state, so bad input changes nothing.
        let (s_heads, s_spans, s_items) =
            Self::items(sandboxes, prev_sandboxes, &self.prev_sandboxes, true)?;
        let (c_heads, c_spans, c_items) =
            Self::items(containers, prev_containers, &self.prev_containers, false)?;

        // When every item is byte-identical at the same position as last time,
        // the running counts cannot have changed: skip recounting them.
        let same = |items: &[Item<'_>], layout: &Layout| {
            items.len() == layout.slots.len() && items.iter().all(|i| matches!(i, Item::Same(_)))
        };
        let sandboxes_same = same(&s_items, &self.prev_sandboxes);
        let containers_same = same(&c_items, &self.prev_containers);

        self.generation += 1;
        let generation = self.generation;
        let mut events: Vec<Event> = Vec::new();
        let mut s_slots = Vec::with_capacity(s_items.len());
        let mut c_slots = Vec::with_capacity(c_items.len());
        let mut seen = 0usize;
        for (items, slots) in [(s_items, &mut s_slots), (c_items, &mut c_slots)] {
            for item in items {
                let slot = self.apply(item, generation, &mut events, &mut seen);
                slots.push(slot);
            }
        }
        // Whatever was not seen this time is gone. Every live record seen means
        // nothing vanished, and the sweep over all records is skipped.
        if seen != self.records.len() - self.free.len() {
            for slot in 0..self.records.len() {
                let rec = &self.records[slot];
                if !rec.live || rec.seen == generation {
                    continue;
                }
                for k in transition(rec.state, State::NonExistent) {
                    events.push(Event {
                        pod_uid: rec.uid.clone(),
                        kind: *k,
                        id: rec.id.clone(),
                    });
                }
                self.release(slot as u32);
            }
        }

        if !sandboxes_same {
            let mut running_pods: Vec<&str> = Vec::new();
            for &slot in &s_slots {
                let rec = &self.records[slot as usize];
                if rec.state == State::Running {
                    running_pods.push(&rec.uid);
                }
            }
            running_pods.sort_unstable();
            running_pods.dedup();
            self.running_pods = running_pods.len();
        }
        if !containers_same {
            let count = |st: State| {
                c_slots
                    .iter()
                    .filter(|&&s| self.records[s as usize].state == st)
                    .count()
            };
            self.running_containers = count(State::Running);
            self.exited_containers = count(State::Exited);
        }
        self.prev_sandboxes = Layout {
            heads: s_heads,
            spans: s_spans,
            slots: s_slots,
        };
        self.prev_containers = Layout {
            heads: c_heads,
            spans: c_spans,
            slots: c_slots,
        };

        if !events.is_empty() {
            self.changes += 1;
        }
        events.sort_by(|a, b| (&a.pod_uid, &a.id, a.kind).cmp(&(&b.pod_uid, &b.id, b.kind)));
        let mut changed: Vec<String> = Vec::new();
        for e in &events {
            if changed.last() != Some(&e.pod_uid) {
                changed.push(e.pod_uid.clone());
            }
        }
        Ok((events, changed))
    }

    /// diff without the previous buffers: every item is decoded.
    pub fn diff(
        &mut self,
        sandboxes: &[u8],
        containers: &[u8],
    ) -> Result<(Vec<Event>, Vec<String>), DecodeError> {
        self.diff_with_previous(sandboxes, containers, b"", b"")
    }

    /// Walk a List response once. An item found at the same offset as the
    /// previous response's item of the same index, with the same bytes (tag and
    /// length included), is that item unchanged: it is compared in one
    /// sequential pass and never decoded. Anything else is decoded.
    #[allow(clippy::type_complexity)]
    fn items<'a>(
        buf: &'a [u8],
        prev: &[u8],
        layout: &Layout,
        sandbox: bool,
    ) -> Result<(Vec<usize>, Vec<(usize, usize)>, Vec<Item<'a>>), DecodeError> {
        let cap = layout.slots.len();
        let (mut heads, mut spans, mut out) = (
            Vec::with_capacity(cap),
            Vec::with_capacity(cap),
            Vec::with_capacity(cap),
        );
        let mut r = wire::Reader::new(buf);
        loop {
            let i = out.len();
            let head = r.pos();
            if let (Some(&h), Some(&(a, b))) = (layout.heads.get(i), layout.spans.get(i)) {
                if h == head {
                    if let (Some(x), Some(y)) = (prev.get(h..b), buf.get(h..b)) {
                        if x == y {
                            heads.push(h);
                            spans.push((a, b));
                            out.push(Item::Same(layout.slots[i]));
                            r.seek(b);
                            continue;
                        }
                    }
                }
            }
            let bytes = match r.next_field()? {
                None => break,
                Some((1, wire::Value::Bytes(item))) => item,
                Some(_) => continue, // not an item (unknown field): skipped
            };
            let end = r.pos();
            heads.push(head);
            spans.push((end - bytes.len(), end));
            let (id, uid, st) = if sandbox {
                let s = wire::parse_sandbox(bytes)?;
                (
                    s.id,
                    s.uid,
                    if s.ready {
                        State::Running
                    } else {
                        State::Exited
                    },
                )
            } else {
                let c = wire::parse_container(bytes)?;
                (c.id, c.uid, container_state(c.state))
            };
            out.push(Item::New(wire::utf8(id)?, wire::utf8(uid)?, st));
        }
        Ok((heads, spans, out))
    }

    fn apply(
        &mut self,
        item: Item<'_>,
        generation: u64,
        events: &mut Vec<Event>,
        seen: &mut usize,
    ) -> u32 {
        let (id, uid, st) = match item {
            Item::Same(slot) => {
                let rec = &mut self.records[slot as usize];
                if rec.live && rec.seen != generation {
                    rec.seen = generation;
                    *seen += 1;
                    return slot;
                }
                // Seen already: a repeated ID, the first occurrence counts. (Slots
                // are only released after all items are applied, so it is live.)
                return slot;
            }
            Item::New(id, uid, st) => (id, uid, st),
        };
        if let Some(&slot) = self.index.get(id) {
            let rec = &mut self.records[slot as usize];
            if rec.seen == generation {
                return slot; // a repeated ID: the first occurrence counts
            }
            rec.seen = generation;
            *seen += 1;
            if rec.uid == uid {
                for k in transition(rec.state, st) {
                    events.push(Event {
                        pod_uid: uid.to_owned(),
                        kind: *k,
                        id: id.to_owned(),
                    });
                }
                rec.state = st;
            } else {
                // The same ID under another pod: gone from the old, new in the new.
                for k in transition(rec.state, State::NonExistent) {
                    events.push(Event {
                        pod_uid: rec.uid.clone(),
                        kind: *k,
                        id: id.to_owned(),
                    });
                }
                let old_uid = std::mem::replace(&mut rec.uid, uid.to_owned());
                rec.state = st;
                Self::dec(&mut self.pods, &old_uid);
                *self.pods.entry(uid.to_owned()).or_insert(0) += 1;
                for k in transition(State::NonExistent, st) {
                    events.push(Event {
                        pod_uid: uid.to_owned(),
                        kind: *k,
                        id: id.to_owned(),
                    });
                }
            }
            return slot;
        }
        for k in transition(State::NonExistent, st) {
            events.push(Event {
                pod_uid: uid.to_owned(),
                kind: *k,
                id: id.to_owned(),
            });
        }
        *self.pods.entry(uid.to_owned()).or_insert(0) += 1;
        *seen += 1;
        let rec = Record {
            id: id.to_owned(),
            uid: uid.to_owned(),
            state: st,
            seen: generation,
            live: true,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.records[s as usize] = rec;
                s
            }
            None => {
                self.records.push(rec);
                (self.records.len() - 1) as u32
            }
        };
        self.index.insert(id.to_owned(), slot);
        slot
    }

    fn release(&mut self, slot: u32) {
        let rec = &mut self.records[slot as usize];
        rec.live = false;
        let (id, uid) = (std::mem::take(&mut rec.id), std::mem::take(&mut rec.uid));
        self.index.remove(&id);
        Self::dec(&mut self.pods, &uid);
        self.free.push(slot);
    }

    fn dec(pods: &mut HashMap<String, u32>, uid: &str) {
        if let Some(n) = pods.get_mut(uid) {
            *n -= 1;
            if *n == 0 {
                pods.remove(uid);
            }
        }
    }

    pub fn pod_ids(&self) -> Vec<String> {
        self.pods.keys().cloned().collect()
    }

    pub fn known(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn bytes_field(f: u32, b: &[u8], out: &mut Vec<u8>) {
        varint(u64::from(f << 3 | 2), out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }
    fn varint_field(f: u32, v: u64, out: &mut Vec<u8>) {
        varint(u64::from(f << 3), out);
        varint(v, out);
    }
    fn container(id: &str, uid: &str, state: u64) -> Vec<u8> {
        let mut c = Vec::new();
        bytes_field(1, id.as_bytes(), &mut c);
        varint_field(6, state, &mut c);
        let mut entry = Vec::new();
        bytes_field(1, b"io.kubernetes.pod.uid", &mut entry);
        bytes_field(2, uid.as_bytes(), &mut entry);
        bytes_field(8, &entry, &mut c);
        c
    }
    fn list(items: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for i in items {
            bytes_field(1, i, &mut out);
        }
        out
    }
    fn kinds(ev: &[Event]) -> Vec<(&str, &str, &str)> {
        ev.iter()
            .map(|e| (e.pod_uid.as_str(), e.kind.as_str(), e.id.as_str()))
            .collect()
    }

    #[test]
    fn start_die_remove() {
        let mut d = Differ::new();
        let (ev, changed) = d.diff(b"", &list(&[container("c1", "p1", 1)])).unwrap();
        assert_eq!(kinds(&ev), vec![("p1", "ContainerStarted", "c1")]);
        assert_eq!(changed, vec!["p1"]);
        assert_eq!(d.running_containers, 1);
        let (ev, _) = d.diff(b"", &list(&[container("c1", "p1", 1)])).unwrap();
        assert!(ev.is_empty());
        let (ev, _) = d.diff(b"", &list(&[container("c1", "p1", 2)])).unwrap();
        assert_eq!(kinds(&ev), vec![("p1", "ContainerDied", "c1")]);
        let (ev, _) = d.diff(b"", b"").unwrap();
        assert_eq!(kinds(&ev), vec![("p1", "ContainerRemoved", "c1")]);
        assert!(!d.known("p1"));
    }

    #[test]
    fn running_container_that_disappears_dies_then_is_removed() {
        let mut d = Differ::new();
        d.diff(b"", &list(&[container("c1", "p1", 1)])).unwrap();
        let (ev, _) = d.diff(b"", b"").unwrap();
        assert_eq!(
            kinds(&ev),
            vec![
                ("p1", "ContainerDied", "c1"),
                ("p1", "ContainerRemoved", "c1")
            ]
        );
    }

    #[test]
    fn created_is_unknown_and_changed() {
        let mut d = Differ::new();
        let (ev, _) = d.diff(b"", &list(&[container("c1", "p1", 0)])).unwrap();
        assert_eq!(kinds(&ev), vec![("p1", "ContainerChanged", "c1")]);
    }

    #[test]
    fn unchanged_items_are_recognised_by_their_bytes() {
        let mut d = Differ::new();
        let mut reference = Differ::new();
        let rounds = [
            list(&[container("c1", "p1", 1), container("c2", "p2", 1)]),
            list(&[container("c1", "p1", 1), container("c2", "p2", 2)]),
            list(&[container("c2", "p2", 2), container("c1", "p1", 1)]), // reordered
            list(&[container("c1", "p1", 1)]),
            list(&[container("c1", "p1", 1), container("c3", "p1", 1)]),
        ];
        let mut prev: Vec<u8> = Vec::new();
        for r in rounds.iter() {
            let fast = d.diff_with_previous(b"", r, b"", &prev).unwrap();
            let slow = reference.diff(b"", r).unwrap();
            assert_eq!(fast, slow);
            assert_eq!(d.running_containers, reference.running_containers);
            assert_eq!(d.exited_containers, reference.exited_containers);
            assert_eq!(d.changes, reference.changes);
            prev = r.clone();
        }
    }

    #[test]
    fn garbage_is_an_error_and_changes_nothing() {
        let mut d = Differ::new();
        d.diff(b"", &list(&[container("c1", "p1", 1)])).unwrap();
        assert!(d.diff(b"", &[0x0a, 0xff]).is_err());
        let (ev, _) = d.diff(b"", &list(&[container("c1", "p1", 1)])).unwrap();
        assert!(ev.is_empty());
    }
}
