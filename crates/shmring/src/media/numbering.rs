//! A producer's side of a stream: the numbers it gives a stream's records, and the
//! record that ends the stream.

use super::{
    kind, u32_at, u64_at, EndOfStream, MEDIA_HEADER_SIZE, MEDIA_MAGIC, MEDIA_VERSION,
    MEDIA_VERSION_1, SEQUENCE_AUTO,
};

/// Streams a producer numbers at once; a producer writing more evicts the one it
/// wrote longest ago (whose next record is then numbered from 0 again).
pub(super) const NUMBERED_STREAMS: usize = 8;

/// The next `sequence` of each stream (id and kind) a producer writes: what it fills
/// in a header built with [`SEQUENCE_AUTO`]. A fixed table, so committing allocates
/// nothing.
#[derive(Debug, Default)]
pub(crate) struct Numbering {
    /// (stream id, kind, next sequence, last use).
    next: [(u32, u32, u64, u64); NUMBERED_STREAMS],
    used: usize,
    clock: u64,
}

impl Numbering {
    /// Numbers the media header at the start of `payload` (a record of `kind` for
    /// `stream`, in the committing producer's own reservation) if it asks for it,
    /// and notes the number either way. Anything that is not a media header of a
    /// known version is left alone.
    pub(crate) fn number(&mut self, stream: u32, k: u32, payload: &mut [u8]) {
        if (k != kind::VIDEO && k != kind::AUDIO) || payload.len() < MEDIA_HEADER_SIZE {
            return;
        }
        let version = u16::from_le_bytes([payload[4], payload[5]]);
        if u32_at(payload, 0) != MEDIA_MAGIC
            || (version != MEDIA_VERSION && version != MEDIA_VERSION_1)
        {
            return;
        }
        self.clock += 1;
        let at = match self.next[..self.used]
            .iter()
            .position(|e| e.0 == stream && e.1 == k)
        {
            Some(i) => i,
            None => {
                let i = if self.used < NUMBERED_STREAMS {
                    self.used += 1;
                    self.used - 1
                } else {
                    (0..NUMBERED_STREAMS)
                        .min_by_key(|&i| self.next[i].3)
                        .expect("a full table")
                };
                self.next[i] = (stream, k, 0, 0);
                i
            }
        };
        let e = &mut self.next[at];
        let mut seq = u64_at(payload, 40);
        if seq == SEQUENCE_AUTO {
            seq = e.2;
            payload[40..48].copy_from_slice(&seq.to_le_bytes());
        }
        e.2 = seq.wrapping_add(1);
        e.3 = self.clock;
    }
}

#[cfg(not(loom))]
impl crate::Producer {
    /// Ends stream `stream` of kind `k` ([`kind::VIDEO`] or [`kind::AUDIO`]): commits
    /// an end-of-stream record (see the module's documentation), numbered after the
    /// stream's last record from this producer. Readers end that stream there
    /// (`shmringsrc` sends EOS, `shmring record` closes the stream's file).
    ///
    /// ```
    /// use shmring::media::{self, kind, Format, MediaHeader, MediaRecord, SEQUENCE_AUTO};
    /// use shmring::{Address, Config, Meta};
    /// let seg = Address::memfd("doc-end", Config::with_capacity(1 << 20)).open()?;
    /// let consumer = seg.consumer()?;
    /// let mut producer = seg.producer()?;
    /// let hd = MediaHeader::video(Format::I420, 16, 16, 0, SEQUENCE_AUTO).unwrap();
    /// let mut frame = vec![0u8; hd.payload_len()];
    /// hd.write_to(&mut frame).unwrap();
    /// producer.send(&frame, Meta::new(3, kind::VIDEO))?; // numbered 0
    /// producer.end_stream(3, kind::VIDEO)?;              // numbered 1
    /// let f = consumer.try_next()?.unwrap();
    /// assert!(matches!(media::read(f.kind(), f.payload()), Ok(MediaRecord::Frame(h)) if h.sequence == 0));
    /// drop(f);
    /// let f = consumer.try_next()?.unwrap();
    /// assert!(matches!(media::read(f.kind(), f.payload()), Ok(MediaRecord::End(e)) if e.sequence == 1));
    /// # Ok::<(), shmring::Error>(())
    /// ```
    pub fn end_stream(&mut self, stream: u32, k: u32) -> Result<(), crate::Error> {
        if k != kind::VIDEO && k != kind::AUDIO {
            return Err(crate::Error::Config(format!(
                "end_stream: kind {k} is not a media kind (video {}, audio {})",
                kind::VIDEO,
                kind::AUDIO
            )));
        }
        let end = EndOfStream {
            pts_ns: 0,
            sequence: SEQUENCE_AUTO,
        };
        self.send(&end.to_bytes(), crate::Meta::new(stream, k))
    }
}
