//! A record read from the ring, and the memory of the buffer made of it: a frame
//! in place ([`Held`]) or a copy ([`Copied`]).

use super::*;

/// A frame in the ring, owned by a `GstMemory`: released when that is freed.
pub(crate) struct Held {
    pub(crate) frame: SharedFrame,
    pub(crate) tracker: Arc<Tracker>,
    pub(crate) lane: Arc<Lane>,
    pub(crate) generation: u64,
    pub(crate) at: u64,
    /// Its place in the reader's list of frames held in place.
    pub(crate) place: usize,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        self.frame.payload()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.tracker.held_frames.fetch_sub(1, Ordering::Relaxed);
        self.tracker
            .held_bytes
            .fetch_sub(self.frame.len() as u64, Ordering::Relaxed);
        self.tracker.returned(&self.lane, self.generation, self.at);
        // Release: the reader that sees the flag may reuse the place.
        self.tracker.back[self.place].store(true, Ordering::Release);
        // The frame goes back to the ring as the field drops, after this.
    }
}

/// A copy of a record, owned by a `GstMemory`: given back to the reader's spares
/// when freed (so in the steady state a copy allocates nothing).
pub(crate) struct Copied {
    pub(crate) buf: Vec<u8>,
    pub(crate) home: Arc<ArrayQueue<Vec<u8>>>,
    pub(crate) tracker: Arc<Tracker>,
    pub(crate) lane: Arc<Lane>,
    pub(crate) generation: u64,
    pub(crate) at: u64,
}

impl AsRef<[u8]> for Copied {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Copied {
    fn drop(&mut self) {
        self.tracker.returned(&self.lane, self.generation, self.at);
        // A full queue drops the copy instead.
        let _ = self.home.push(std::mem::take(&mut self.buf));
    }
}

/// A buffer of one memory over `data[first..end]`.
pub(crate) fn buffer_over<T: AsRef<[u8]> + Send + 'static>(
    data: T,
    first: usize,
    end: usize,
) -> gst::Buffer {
    let mut mem = gst::Memory::from_slice(data);
    mem.get_mut()
        .expect("a new memory is writable")
        .resize(first..end);
    let mut b = gst::Buffer::new();
    b.get_mut()
        .expect("a new buffer is writable")
        .append_memory(mem);
    b
}

/// Where a record's bytes are.
pub(crate) enum Data {
    /// A frame of the ring, held until released.
    Frame(SharedFrame),
    /// A tap's copy.
    Copy(Vec<u8>),
}

/// One media record read from the ring.
pub struct Record {
    pub meta: Meta,
    pub media: MediaRecord,
    /// Something was lost before it: a gap in its stream's sequence, a reset of
    /// the ring, records a tap lost, or its stream starting (again).
    pub discont: bool,
    /// This record made it plain that two producers write its stream id (said
    /// once per stream).
    pub second_producer: bool,
    /// It arrived while the reader waited for it (it did not wait in the ring for
    /// the reader): its age at output says how late producers deliver.
    pub(crate) fresh: bool,
    pub(crate) data: Data,
    pub(crate) at: u64,
}

impl Record {
    /// See the field.
    pub fn fresh(&self) -> bool {
        self.fresh
    }

    pub(crate) fn payload(&self) -> &[u8] {
        match &self.data {
            Data::Frame(f) => f.payload(),
            Data::Copy(buf) => buf,
        }
    }
}
