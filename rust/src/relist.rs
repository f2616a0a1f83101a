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
    uid: String,
    state: State,
    seen: u64, // the relist generation that last saw it
}

#[derive(Default)]
pub struct Differ {
    records: HashMap<String, Record>,
    pods: HashMap<String, u32>, // pod UID -> how many records it has
    generation: u64,
    pub running_pods: usize,
    pub running_containers: usize,
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

fn utf8(b: &[u8]) -> Result<&str, DecodeError> {
    std::str::from_utf8(b).map_err(|_| DecodeError("invalid UTF-8 in a string field"))
}

impl Differ {
    pub fn new() -> Self {
        Self::default()
    }

    /// Diff a new relist against the previous one. Events are ordered by pod
    /// UID, then ID; `changed` lists the pods with events in that order.
    pub fn diff(
        &mut self,
        sandboxes: &[u8],
        containers: &[u8],
    ) -> Result<(Vec<Event>, Vec<String>), DecodeError> {
        // Decode fully before touching state, so bad input changes nothing.
        let mut items: Vec<(&str, &str, State)> = Vec::new();
        let mut bad: Option<DecodeError> = None;
        let mut running_pod_uids: Vec<&str> = Vec::new();
        wire::for_each_sandbox(sandboxes, |s| match (utf8(s.id), utf8(s.uid)) {
            (Ok(id), Ok(uid)) => {
                let st = if s.ready {
                    State::Running
                } else {
                    State::Exited
                };
                if s.ready {
                    running_pod_uids.push(uid);
                }
                items.push((id, uid, st));
            }
            (Err(e), _) | (_, Err(e)) => bad = Some(e),
        })?;
        let mut running_containers = 0usize;
        wire::for_each_container(containers, |c| match (utf8(c.id), utf8(c.uid)) {
            (Ok(id), Ok(uid)) => {
                let st = container_state(c.state);
                if st == State::Running {
                    running_containers += 1;
                }
                items.push((id, uid, st));
            }
            (Err(e), _) | (_, Err(e)) => bad = Some(e),
        })?;
        if let Some(e) = bad {
            return Err(e);
        }

        self.generation += 1;
        let generation = self.generation;
        let mut events: Vec<Event> = Vec::new();
        for (id, uid, st) in items {
            match self.records.get_mut(id) {
                Some(rec) if rec.uid == uid => {
                    if rec.seen == generation {
                        continue; // a duplicate ID in one response: first one wins
                    }
                    rec.seen = generation;
                    if rec.state != st {
                        for k in transition(rec.state, st) {
                            events.push(Event {
                                pod_uid: uid.to_owned(),
                                kind: *k,
                                id: id.to_owned(),
                            });
                        }
                        rec.state = st;
                    }
                }
                Some(rec) => {
                    if rec.seen == generation {
                        continue;
                    }
                    // Same ID under another pod: gone from the old, new in the new.
                    for k in transition(rec.state, State::NonExistent) {
                        events.push(Event {
                            pod_uid: rec.uid.clone(),
                            kind: *k,
                            id: id.to_owned(),
                        });
                    }
                    Self::dec(&mut self.pods, &rec.uid);
                    *self.pods.entry(uid.to_owned()).or_insert(0) += 1;
                    rec.uid = uid.to_owned();
                    rec.state = st;
                    rec.seen = generation;
                    for k in transition(State::NonExistent, st) {
                        events.push(Event {
                            pod_uid: uid.to_owned(),
                            kind: *k,
                            id: id.to_owned(),
                        });
                    }
                }
                None => {
                    for k in transition(State::NonExistent, st) {
                        events.push(Event {
                            pod_uid: uid.to_owned(),
                            kind: *k,
                            id: id.to_owned(),
                        });
                    }
                    *self.pods.entry(uid.to_owned()).or_insert(0) += 1;
                    self.records.insert(
                        id.to_owned(),
                        Record {
                            uid: uid.to_owned(),
                            state: st,
                            seen: generation,
                        },
                    );
                }
            }
        }
        // Whatever was not seen this time is gone.
        let pods = &mut self.pods;
        self.records.retain(|id, rec| {
            if rec.seen == generation {
                return true;
            }
            for k in transition(rec.state, State::NonExistent) {
                events.push(Event {
                    pod_uid: rec.uid.clone(),
                    kind: *k,
                    id: id.clone(),
                });
            }
            Self::dec(pods, &rec.uid);
            false
        });

        running_pod_uids.sort_unstable();
        running_pod_uids.dedup();
        self.running_pods = running_pod_uids.len();
        self.running_containers = running_containers;

        events.sort_by(|a, b| (&a.pod_uid, &a.id, a.kind).cmp(&(&b.pod_uid, &b.id, b.kind)));
        let mut changed: Vec<String> = Vec::new();
        for e in &events {
            if changed.last() != Some(&e.pod_uid) {
                changed.push(e.pod_uid.clone());
            }
        }
        Ok((events, changed))
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
    fn garbage_is_an_error_and_changes_nothing() {
        let mut d = Differ::new();
        d.diff(b"", &list(&[container("c1", "p1", 1)])).unwrap();
        assert!(d.diff(b"", &[0x0a, 0xff]).is_err());
        let (ev, _) = d.diff(b"", &list(&[container("c1", "p1", 1)])).unwrap();
        assert!(ev.is_empty());
    }
}
