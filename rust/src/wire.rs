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
