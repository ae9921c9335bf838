//! Which records a reader takes, by their kind and stream: the one rule of taps
//! ([`crate::TapOptions::filter`]) and consumers
//! ([`crate::ConsumerOptions::filter`]).

/// Which records a reader takes: those of one kind, of one stream, or both (`None`:
/// any). The default, [`Filter::ANY`], takes every record.
///
/// A tap steps over the records its filter refuses; a consumer releases them at
/// once, unread, so their space returns to producers as if it had read them. Both
/// count them (`filtered`).
///
/// ```
/// use shmring::{media::kind, Filter, Meta};
/// let video_of_3 = Filter { kind: Some(kind::VIDEO), stream: Some(3) };
/// assert!(video_of_3.takes(&Meta::new(3, kind::VIDEO)));
/// assert!(!video_of_3.takes(&Meta::new(3, kind::AUDIO)));
/// assert!(!video_of_3.takes(&Meta::new(4, kind::VIDEO)));
/// assert!(Filter::ANY.takes(&Meta::new(4, kind::AUDIO)));
/// assert_eq!(Filter::default(), Filter::ANY);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// Only records of this kind (see [`crate::media::kind`]).
    pub kind: Option<u32>,
    /// Only records of this stream.
    pub stream: Option<u32>,
}

impl Filter {
    /// Every record.
    pub const ANY: Filter = Filter {
        kind: None,
        stream: None,
    };

    /// Does the filter take a record of this kind and stream?
    #[inline]
    pub fn takes_record(&self, kind: u32, stream: u32) -> bool {
        self.kind.is_none_or(|k| k == kind) && self.stream.is_none_or(|s| s == stream)
    }

    /// Does the filter take a record with this meta?
    #[inline]
    pub fn takes(&self, meta: &crate::Meta) -> bool {
        self.takes_record(meta.kind, meta.stream)
    }

    /// Does it take every record?
    pub fn is_any(&self) -> bool {
        *self == Filter::ANY
    }
}
