//! Fuzzing the raw-bytes relist path: the wire reader and the differ.
//!
//! Inputs are arbitrary byte strings and mutations of real CRI List responses
//! (tests/corpus/, written by hack/gen_wire_corpus.py from the simulated
//! runtime). Properties: nothing panics, bad input is an error that leaves the
//! differ as it was, and the byte-compare fast path agrees with a full decode.
//!
//! `cargo test` runs a bounded number of cases (proptest's default, 256 per
//! property); a long campaign:
//!     PROPTEST_CASES=1000000 cargo test --release --test fuzz_wire

use kubelet_native::relist::{Differ, Event};
use kubelet_native::wire::{self, Reader};
use proptest::prelude::*;

const CORPUS: [(&[u8], &[u8]); 3] = [
    (
        include_bytes!("corpus/sandboxes-0.bin"),
        include_bytes!("corpus/containers-0.bin"),
    ),
    (
        include_bytes!("corpus/sandboxes-1.bin"),
        include_bytes!("corpus/containers-1.bin"),
    ),
    (
        include_bytes!("corpus/sandboxes-2.bin"),
        include_bytes!("corpus/containers-2.bin"),
    ),
];

#[derive(Clone, Debug)]
enum Mutation {
    FlipBit(usize, u8),
    SetByte(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    // Copy a range of the other response of the same step to a position.
    Splice(usize, usize, usize),
    // Repeat a range in place (duplicate items, duplicate IDs).
    Repeat(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(p, b)| Mutation::FlipBit(p, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(p, v)| Mutation::SetByte(p, v)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..12))
            .prop_map(|(p, v)| Mutation::Insert(p, v)),
        (any::<usize>(), 1usize..64).prop_map(|(p, n)| Mutation::Remove(p, n)),
        (any::<usize>(), 1usize..256, any::<usize>())
            .prop_map(|(a, n, p)| Mutation::Splice(a, n, p)),
        (any::<usize>(), 1usize..256).prop_map(|(a, n)| Mutation::Repeat(a, n)),
    ]
}

fn apply(buf: &mut Vec<u8>, other: &[u8], m: &Mutation) {
    let at = |p: usize, len: usize| if len == 0 { 0 } else { p % (len + 1) };
    match m {
        Mutation::FlipBit(p, b) if !buf.is_empty() => {
            let i = p % buf.len();
            buf[i] ^= 1 << b;
        }
        Mutation::SetByte(p, v) if !buf.is_empty() => {
            let i = p % buf.len();
            buf[i] = *v;
        }
        Mutation::Truncate(p) => buf.truncate(at(*p, buf.len())),
        Mutation::Insert(p, v) => {
            let i = at(*p, buf.len());
            buf.splice(i..i, v.iter().copied());
        }
        Mutation::Remove(p, n) if !buf.is_empty() => {
            let i = p % buf.len();
            let j = (i + n).min(buf.len());
            buf.drain(i..j);
        }
        Mutation::Splice(a, n, p) if !other.is_empty() => {
            let i = a % other.len();
            let j = (i + n).min(other.len());
            let k = at(*p, buf.len());
            buf.splice(k..k, other[i..j].iter().copied());
        }
        Mutation::Repeat(a, n) if !buf.is_empty() => {
            let i = a % buf.len();
            let j = (i + n).min(buf.len());
            let chunk = buf[i..j].to_vec();
            buf.splice(j..j, chunk);
        }
        _ => {}
    }
}

/// One relist input: a corpus step, mutated (or not) in each response.
#[derive(Clone, Debug)]
struct Step {
    step: usize,
    sandbox_mutations: Vec<Mutation>,
    container_mutations: Vec<Mutation>,
}

fn step() -> impl Strategy<Value = Step> {
    (
        0usize..CORPUS.len(),
        prop::collection::vec(mutation(), 0..4),
        prop::collection::vec(mutation(), 0..4),
    )
        .prop_map(|(step, s, c)| Step {
            step,
            sandbox_mutations: s,
            container_mutations: c,
        })
}

fn build(st: &Step) -> (Vec<u8>, Vec<u8>) {
    let (s0, c0) = CORPUS[st.step];
    let (mut s, mut c) = (s0.to_vec(), c0.to_vec());
    for m in &st.sandbox_mutations {
        apply(&mut s, c0, m);
    }
    for m in &st.container_mutations {
        apply(&mut c, s0, m);
    }
    (s, c)
}

type Outcome = Result<(Vec<Event>, Vec<String>), wire::DecodeError>;

/// Read every field of a message (and of every length-delimited field as a
/// nested message) to the end or the first error; each step must advance.
fn walk(buf: &[u8], depth: u32) {
    let mut r = Reader::new(buf);
    loop {
        let before = r.pos();
        match r.next_field() {
            Ok(Some((_, wire::Value::Bytes(b)))) => {
                if depth < 4 {
                    walk(b, depth + 1);
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
        assert!(r.pos() > before, "the reader did not advance");
        assert!(r.pos() <= buf.len());
    }
}

proptest! {
    /// Arbitrary bytes through the reader, the item parsers and the differ.
    #[test]
    fn fuzz_arbitrary_bytes(
        s in prop::collection::vec(any::<u8>(), 0..512),
        c in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        walk(&s, 0);
        walk(&c, 0);
        let _ = wire::parse_sandbox(&s);
        let _ = wire::parse_container(&c);
        let mut d = Differ::new();
        // A known state first, so an error has something to leave unchanged.
        let (s1, c1) = CORPUS[1];
        d.diff(s1, c1).unwrap();
        let r = d.diff_with_previous(&s, &c, s1, c1);
        if r.is_err() {
            // Nothing changed: the same valid input again gives no events.
            let (ev, changed) = d.diff_with_previous(s1, c1, s1, c1).unwrap();
            prop_assert!(ev.is_empty() && changed.is_empty());
        }
    }

    /// Sequences of mutated real responses: the byte-compare fast path (the
    /// previous buffers given) and a full decode of every item agree on every
    /// step, errors included; an error leaves both differs as they were.
    #[test]
    fn fuzz_mutated_responses(steps in prop::collection::vec(step(), 1..6)) {
        let mut fast = Differ::new();
        let mut slow = Differ::new();
        let mut prev: (Vec<u8>, Vec<u8>) = (Vec::new(), Vec::new());
        for st in &steps {
            let (s, c) = build(st);
            let a: Outcome = fast.diff_with_previous(&s, &c, &prev.0, &prev.1);
            let b: Outcome = slow.diff(&s, &c);
            prop_assert_eq!(a.is_ok(), b.is_ok(), "fast {:?} slow {:?}", a, b);
            if let (Ok(a), Ok(b)) = (a, b) {
                prop_assert_eq!(a, b);
                prop_assert_eq!(fast.running_pods, slow.running_pods);
                prop_assert_eq!(fast.running_containers, slow.running_containers);
                // The caller keeps the buffers of the last successful diff only.
                prev = (s, c);
            }
        }
        let mut f = fast.pod_ids();
        let mut s = slow.pod_ids();
        f.sort();
        s.sort();
        prop_assert_eq!(f, s);
    }
}

#[test]
fn corpus_decodes() {
    let mut d = Differ::new();
    let mut prev: (&[u8], &[u8]) = (b"", b"");
    let mut all = Vec::new();
    for (s, c) in CORPUS {
        let (ev, _) = d.diff_with_previous(s, c, prev.0, prev.1).unwrap();
        all.extend(ev);
        prev = (s, c);
    }
    // The corpus holds three pods: started, died, a created container and a
    // stopped sandbox, so the fuzzing starts from every kind of event.
    let kinds: std::collections::BTreeSet<_> = all.iter().map(|e| e.kind.as_str()).collect();
    assert!(kinds.contains("ContainerStarted"), "{kinds:?}");
    assert!(kinds.contains("ContainerDied"), "{kinds:?}");
    assert!(kinds.contains("ContainerChanged"), "{kinds:?}");
    assert_eq!(d.pod_ids().len(), 3);
}
