//! What the consumer hands out: a [`Frame`] that borrows it and releases itself
//! when dropped, or a [`RawFrame`] that bindings release by hand.

use crate::producer::Meta;

use super::Consumer;

/// A record handed out by the consumer, without a borrow: for bindings that manage
/// lifetimes themselves. Release it with [`Consumer::release_raw`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFrame {
    /// Consumer-local sequence number (identifies the frame for release).
    pub seq: u64,
    /// Payload address inside the mapping (64-byte aligned).
    pub ptr: *const u8,
    pub len: usize,
    pub meta: Meta,
}

/// A frame: a record's payload in place in shared memory, valid until dropped.
pub struct Frame<'c> {
    pub(super) consumer: &'c Consumer,
    pub(super) raw: RawFrame,
}

impl Frame<'_> {
    /// The payload, in the ring (no copy). A misbehaving producer could still change
    /// these bytes while you read them; see the threat model in `docs/DESIGN.md`.
    pub fn payload(&self) -> &[u8] {
        // SAFETY: ptr/len were computed from validated local copies and lie inside the
        // data ring; the record is held (not released), so no honest producer can
        // claim these bytes until this frame is dropped.
        unsafe { std::slice::from_raw_parts(self.raw.ptr, self.raw.len) }
    }
    pub fn meta(&self) -> Meta {
        self.raw.meta
    }
    pub fn stream(&self) -> u32 {
        self.raw.meta.stream
    }
    pub fn kind(&self) -> u32 {
        self.raw.meta.kind
    }
    pub fn timestamp_ns(&self) -> u64 {
        self.raw.meta.timestamp_ns
    }
    pub fn seq(&self) -> u64 {
        self.raw.seq
    }
    /// Releases the frame now (same as dropping it).
    pub fn release(self) {}
    /// Turns the frame into a raw one that must be released with
    /// [`Consumer::release_raw`].
    pub fn into_raw(self) -> RawFrame {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }
}

impl std::ops::Deref for Frame<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.payload()
    }
}

impl Drop for Frame<'_> {
    fn drop(&mut self) {
        let _ = self.consumer.release_raw(self.raw.seq);
    }
}

impl std::fmt::Debug for Frame<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("seq", &self.raw.seq)
            .field("len", &self.raw.len)
            .field("meta", &self.raw.meta)
            .finish()
    }
}
