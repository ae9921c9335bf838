//! Record kinds used by shmring's tools. Applications may use any other values.

/// Values for [`crate::Meta::kind`].
pub mod kind {
    /// Opaque bytes.
    pub const RAW: u32 = 0;
    /// A video frame: payload starts with a media header, then the planes.
    pub const VIDEO: u32 = 1;
    /// An audio packet: payload starts with a media header, then the samples.
    pub const AUDIO: u32 = 2;
}
