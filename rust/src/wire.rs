//! A zero-copy reader for the few protobuf messages the relist needs.
//!
//! ListPodSandboxResponse and ListContainersResponse are walked in place:
//! strings come out as byte slices of the response, so unchanged containers
//! cost no allocation at all. Field numbers are those of CRI runtime.v1.

#[derive(Debug, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

pub enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Skipped,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Continue at `pos` (the caller knows a field ends there).
    pub fn seek(&mut self, pos: usize) {
        self.pos = pos.min(self.buf.len());
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut out: u64 = 0;
        for shift in (0..70).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or(DecodeError("truncated varint"))?;
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(DecodeError("varint overflow"));
            }
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(DecodeError("varint too long"))
    }

    /// The next (field number, value), or None at the end.
    pub fn next_field(&mut self) -> Result<Option<(u32, Value<'a>)>, DecodeError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| DecodeError("field number too large"))?;
        if field == 0 {
            return Err(DecodeError("field number 0"));
        }
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.skip(8)?;
                Value::Skipped
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| DecodeError("length"))?;
                let end = self
                    .pos
                    .checked_add(len)
                    .ok_or(DecodeError("length overflow"))?;
                let s = self
                    .buf
                    .get(self.pos..end)
                    .ok_or(DecodeError("truncated bytes"))?;
                self.pos = end;
                Value::Bytes(s)
            }
            5 => {
                self.skip(4)?;
                Value::Skipped
            }
            _ => return Err(DecodeError("unsupported wire type")),
        };
        Ok(Some((field, value)))
    }

    fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError("overflow"))?;
        if end > self.buf.len() {
            return Err(DecodeError("truncated fixed field"));
        }
        self.pos = end;
        Ok(())
    }
}

/// A sandbox as the relist sees it: (id, pod uid, ready).
pub struct SandboxRef<'a> {
    pub id: &'a [u8],
    pub uid: &'a [u8],
    pub ready: bool,
}

/// A container as the relist sees it: (id, pod uid from its label, CRI state).
pub struct ContainerRef<'a> {
    pub id: &'a [u8],
    pub uid: &'a [u8],
    pub state: u64,
}

const POD_UID_LABEL: &[u8] = b"io.kubernetes.pod.uid";

/// One sandbox item (a PodSandbox message) as the relist sees it.
pub fn parse_sandbox(item: &[u8]) -> Result<SandboxRef<'_>, DecodeError> {
    let mut s = SandboxRef {
        id: b"",
        uid: b"",
        ready: true,
    };
    let mut ir = Reader::new(item);
    while let Some((f2, v2)) = ir.next_field()? {
        match (f2, v2) {
            (1, Value::Bytes(b)) => s.id = b,
            (2, Value::Bytes(md)) => {
                let mut mr = Reader::new(md);
                while let Some((f3, v3)) = mr.next_field()? {
                    if let (2, Value::Bytes(b)) = (f3, v3) {
                        s.uid = b;
                    }
                }
            }
            (3, Value::Varint(x)) => s.ready = x == 0,
            _ => {}
        }
    }
    Ok(s)
}

/// One container item (a Container message) as the relist sees it.
pub fn parse_container(item: &[u8]) -> Result<ContainerRef<'_>, DecodeError> {
    let mut c = ContainerRef {
        id: b"",
        uid: b"",
        state: 0,
    };
    let mut ir = Reader::new(item);
    while let Some((f2, v2)) = ir.next_field()? {
        match (f2, v2) {
            (1, Value::Bytes(b)) => c.id = b,
            (6, Value::Varint(x)) => c.state = x,
            (8, Value::Bytes(entry)) => {
                let (mut k, mut val): (&[u8], &[u8]) = (b"", b"");
                let mut er = Reader::new(entry);
                while let Some((f3, v3)) = er.next_field()? {
                    match (f3, v3) {
                        (1, Value::Bytes(b)) => k = b,
                        (2, Value::Bytes(b)) => val = b,
                        _ => {}
                    }
                }
                if k == POD_UID_LABEL {
                    c.uid = val;
                }
            }
            _ => {}
        }
    }
    Ok(c)
}

/// A string field's bytes as text; proto3 strings must be UTF-8.
pub fn utf8(b: &[u8]) -> Result<&str, DecodeError> {
    std::str::from_utf8(b).map_err(|_| DecodeError("invalid UTF-8 in a string field"))
}

/// The container IDs of a ListContainersResponse, in order, borrowed from it.
/// Only the IDs are read: each item's other fields are stepped over whole
/// (labels included), about half the work of parsing each item.
pub fn container_ids(buf: &[u8]) -> Result<Vec<&str>, DecodeError> {
    let mut out = Vec::new();
    let mut r = Reader::new(buf);
    while let Some((field, value)) = r.next_field()? {
        if let (1, Value::Bytes(item)) = (field, value) {
            let mut id: &[u8] = b"";
            let mut ir = Reader::new(item);
            while let Some((f2, v2)) = ir.next_field()? {
                if let (1, Value::Bytes(b)) = (f2, v2) {
                    id = b; // a repeated field: the last one wins, as in protobuf
                }
            }
            out.push(utf8(id)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn bytes_field(field: u32, data: &[u8], out: &mut Vec<u8>) {
        varint(u64::from(field) << 3 | 2, out);
        varint(data.len() as u64, out);
        out.extend_from_slice(data);
    }

    fn varint_field(field: u32, v: u64, out: &mut Vec<u8>) {
        varint(u64::from(field) << 3, out);
        varint(v, out);
    }

    /// A Container with an id, a state, labels and one field of every other wire type.
    fn container(id: &str, uid: &str, state: u64) -> Vec<u8> {
        let mut c = Vec::new();
        bytes_field(2, b"sandbox", &mut c);
        bytes_field(1, id.as_bytes(), &mut c);
        varint_field(6, state, &mut c);
        varint_field(7, 1_700_000_000_000_000_000, &mut c);
        for (k, v) in [("app", "x"), ("io.kubernetes.pod.uid", uid)] {
            let mut e = Vec::new();
            bytes_field(1, k.as_bytes(), &mut e);
            bytes_field(2, v.as_bytes(), &mut e);
            bytes_field(8, &e, &mut c);
        }
        c.extend_from_slice(&[0x99, 0x06, 1, 2, 3, 4, 5, 6, 7, 8]); // field 99, fixed64
        c.extend_from_slice(&[0x9d, 0x06, 1, 2, 3, 4]); // field 99, fixed32
        c
    }

    fn response(items: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        varint_field(50, 7, &mut out); // an unknown top-level field
        for it in items {
            bytes_field(1, it, &mut out);
        }
        bytes_field(51, b"unknown", &mut out);
        out
    }

    #[test]
    fn ids_in_order_with_unknown_fields_skipped() {
        let buf = response(&[
            container("c2", "u1", 1),
            container("c1", "u2", 2),
            container("c3", "", 0),
        ]);
        assert_eq!(container_ids(&buf).unwrap(), vec!["c2", "c1", "c3"]);
    }

    #[test]
    fn empty_response_and_container_without_id() {
        assert!(container_ids(b"").unwrap().is_empty());
        let mut bare = Vec::new();
        bytes_field(1, b"", &mut bare); // an empty Container: id ""
        assert_eq!(container_ids(&bare).unwrap(), vec![""]);
    }

    #[test]
    fn a_repeated_id_field_last_one_wins() {
        let mut c = Vec::new();
        bytes_field(1, b"first", &mut c);
        bytes_field(1, b"second", &mut c);
        assert_eq!(container_ids(&response(&[c])).unwrap(), vec!["second"]);
    }

    #[test]
    fn malformed_input_is_an_error() {
        let mut good = Vec::new();
        bytes_field(1, &container("abc", "u", 1), &mut good);
        for cut in 1..good.len() {
            // Every strict prefix cuts the one item short.
            assert!(container_ids(&good[..cut]).is_err(), "prefix {cut}");
        }
        assert_eq!(
            container_ids(&[0x0b]).unwrap_err(),
            DecodeError("unsupported wire type")
        );
        assert_eq!(
            container_ids(&[0x02, 0x00]).unwrap_err(),
            DecodeError("field number 0")
        );
        let mut bad = Vec::new();
        bytes_field(1, &[0x0a, 0x02, 0xff, 0xfe], &mut bad);
        assert_eq!(
            container_ids(&bad).unwrap_err(),
            DecodeError("invalid UTF-8 in a string field")
        );
        let mut bad_item = Vec::new();
        bytes_field(1, &[0x0a, 0x05, b'x'], &mut bad_item); // the id runs past its container
        assert!(container_ids(&bad_item).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let good = response(&[container("abc", "u", 1), container("def", "v", 2)]);
        for i in 0..good.len() {
            for b in [0x00, 0x01, 0x07, 0x0a, 0x7f, 0x80, 0xff] {
                let mut m = good.clone();
                m[i] = b;
                let _ = container_ids(&m);
            }
        }
    }
}
