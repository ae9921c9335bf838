//! The formats: their numbers in the header, their names, and the plane table (the
//! shape of each plane of a frame of a format at a given size).
//!
//! **Names.** Every format has one stable, lowercase name ([`Format::name`]):
//! `i420`, `nv12`, `rgba`, `pcm_s16`, `pcm_f32`. The bindings give and take these
//! names, and [`Format`]'s `FromStr` reads them (any case, and the aliases `s16` and
//! `f32`). Another library's vocabulary (GStreamer's `S16LE`, ...) is that library's
//! binding's to map.
//!
//! **Planes.** [`Format::plane_table`] is the one place that knows how a format lays
//! out a frame: how many planes, and for each its rows, its columns (elements per
//! row) and the bytes of an element. Headers are built and checked with it
//! ([`MediaHeader::video`](super::MediaHeader::video), [`MediaHeader::parse`](super::MediaHeader::parse)),
//! and readers that view planes (numpy arrays, thumbnails, files) take their shapes
//! from it rather than from a rule of their own.

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

/// Sample and pixel formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Format {
    /// Planar YUV 4:2:0: Y, then U, then V (U and V at half width and height).
    I420 = 1,
    /// Y plane, then interleaved UV at half width and height.
    Nv12 = 2,
    /// Packed 8-bit RGBA.
    Rgba = 3,
    /// Interleaved signed 16-bit PCM.
    PcmS16 = 16,
    /// Interleaved 32-bit float PCM.
    PcmF32 = 17,
}

/// Other names [`Format`]'s `FromStr` accepts, with the format each names.
const ALIASES: [(&str, Format); 2] = [("s16", Format::PcmS16), ("f32", Format::PcmF32)];

impl Format {
    /// Every format, in the order of their numbers: video, then audio.
    pub const ALL: [Format; 5] = [
        Format::I420,
        Format::Nv12,
        Format::Rgba,
        Format::PcmS16,
        Format::PcmF32,
    ];

    /// The format numbered `v` in a header, if any.
    pub fn from_u32(v: u32) -> Option<Format> {
        Format::ALL.into_iter().find(|f| *f as u32 == v)
    }

    pub fn is_video(self) -> bool {
        matches!(self, Format::I420 | Format::Nv12 | Format::Rgba)
    }

    pub fn is_audio(self) -> bool {
        !self.is_video()
    }

    /// Bytes per sample (audio formats; 0 for video).
    pub fn sample_bytes(self) -> u32 {
        match self {
            Format::PcmS16 => 2,
            Format::PcmF32 => 4,
            _ => 0,
        }
    }

    /// The format's stable name: lowercase, what every binding gives and takes
    /// (`"i420"`, `"nv12"`, `"rgba"`, `"pcm_s16"`, `"pcm_f32"`). Also its `Display`.
    pub fn name(self) -> &'static str {
        match self {
            Format::I420 => "i420",
            Format::Nv12 => "nv12",
            Format::Rgba => "rgba",
            Format::PcmS16 => "pcm_s16",
            Format::PcmF32 => "pcm_f32",
        }
    }

    /// The format's other accepted names (`"s16"` for `pcm_s16`, `"f32"` for
    /// `pcm_f32`).
    pub fn aliases(self) -> impl Iterator<Item = &'static str> {
        ALIASES
            .into_iter()
            .filter(move |(_, f)| *f == self)
            .map(|(a, _)| a)
    }

    /// The planes of a frame of this format: for video, `a` x `b` is its width x
    /// height in pixels; for audio, `a` is its channels and `b` its samples per
    /// channel. See [`PlaneTable`]; [`super::MediaHeader::plane_table`] reads the
    /// sizes from a header.
    ///
    /// ```
    /// use shmring::media::{Format, Plane};
    /// // I420 at an odd size: chroma rounds up.
    /// let t = Format::I420.plane_table(5, 3);
    /// assert_eq!(t.len(), 3);
    /// assert_eq!(t[0], Plane { columns: 5, rows: 3, components: 1, component_bytes: 1 });
    /// assert_eq!((t[1].columns, t[1].rows), (3, 2));
    /// assert_eq!(t.bytes(), 5 * 3 + 2 * 3 * 2);
    /// // NV12: Y, then one UV plane of two components per element.
    /// let t = Format::Nv12.plane_table(5, 3);
    /// assert_eq!((t[1].columns, t[1].rows, t[1].components), (3, 2, 2));
    /// assert_eq!(t[1].row_bytes(), 6);
    /// // Audio: one plane, a row per sample, a column per channel.
    /// let t = Format::PcmF32.plane_table(2, 480);
    /// assert_eq!(t[0], Plane { columns: 2, rows: 480, components: 1, component_bytes: 4 });
    /// assert_eq!(t[0].row_bytes(), 8);
    /// ```
    pub fn plane_table(self, a: u32, b: u32) -> PlaneTable {
        let px = |columns, rows, components| Plane {
            columns,
            rows,
            components,
            component_bytes: 1,
        };
        let (w, h) = (a, b);
        let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
        let none = px(0, 0, 0);
        let (planes, len) = match self {
            Format::I420 => ([px(w, h, 1), px(cw, ch, 1), px(cw, ch, 1)], 3),
            Format::Nv12 => ([px(w, h, 1), px(cw, ch, 2), none], 2),
            Format::Rgba => ([px(w, h, 4), none, none], 1),
            Format::PcmS16 | Format::PcmF32 => {
                let samples = Plane {
                    columns: a,
                    rows: b,
                    components: 1,
                    component_bytes: self.sample_bytes(),
                };
                ([samples, none, none], 1)
            }
        };
        PlaneTable { planes, len }
    }
}

impl fmt::Display for Format {
    /// The format's [`Format::name`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no format's: the error of [`Format`]'s `FromStr`, whose message
/// lists the names ([`Format::ALL`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFormat(pub String);

impl fmt::Display for UnknownFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown media format {:?}: expected one of ", self.0)?;
        for (i, g) in Format::ALL.iter().enumerate() {
            f.write_str(if i == 0 { "" } else { ", " })?;
            f.write_str(g.name())?;
            let mut aliases = g.aliases().peekable();
            if aliases.peek().is_some() {
                f.write_str(" (or ")?;
                for (j, a) in aliases.enumerate() {
                    f.write_str(if j == 0 { "" } else { ", " })?;
                    f.write_str(a)?;
                }
                f.write_str(")")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for UnknownFormat {}

impl FromStr for Format {
    type Err = UnknownFormat;

    /// A format by its [`Format::name`] or an alias, in any case.
    ///
    /// ```
    /// use shmring::media::Format;
    /// assert_eq!("NV12".parse::<Format>(), Ok(Format::Nv12));
    /// assert_eq!("s16".parse::<Format>(), Ok(Format::PcmS16));
    /// for f in Format::ALL {
    ///     assert_eq!(f.name().parse::<Format>(), Ok(f));
    /// }
    /// let e = "yuv9".parse::<Format>().unwrap_err().to_string();
    /// assert!(e.contains("yuv9") && e.contains("i420, nv12, rgba, pcm_s16"), "{e}");
    /// ```
    fn from_str(s: &str) -> Result<Format, UnknownFormat> {
        Format::ALL
            .into_iter()
            .map(|f| (f.name(), f))
            .chain(ALIASES)
            .find(|(n, _)| n.eq_ignore_ascii_case(s))
            .map(|(_, f)| f)
            .ok_or_else(|| UnknownFormat(s.to_string()))
    }
}

/// One plane of a frame, as [`Format::plane_table`] gives it: `rows` rows of
/// `columns` elements, each `components` values of `component_bytes` bytes.
///
/// | format  | plane | columns           | rows              | components | bytes |
/// |---------|-------|-------------------|-------------------|-----------:|------:|
/// | I420    | Y     | width             | height            | 1          | 1     |
/// | I420    | U, V  | ⌈width/2⌉         | ⌈height/2⌉        | 1          | 1     |
/// | NV12    | Y     | width             | height            | 1          | 1     |
/// | NV12    | UV    | ⌈width/2⌉         | ⌈height/2⌉        | 2          | 1     |
/// | RGBA    | RGBA  | width             | height            | 4          | 1     |
/// | PCM s16 | data  | channels          | samples           | 1          | 2     |
/// | PCM f32 | data  | channels          | samples           | 1          | 4     |
///
/// A header's stride for the plane is at least [`Plane::row_bytes`]; the plane's
/// bytes are stride × rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plane {
    /// Elements per row: pixels (video), channels (audio).
    pub columns: u32,
    /// Rows: pixel rows (video), samples per channel (audio).
    pub rows: u32,
    /// Values per element: 1 (Y, U, V, a sample), 2 (NV12's UV), 4 (RGBA).
    pub components: u32,
    /// Bytes per value: 1 (video), 2 (PCM s16), 4 (PCM f32).
    pub component_bytes: u32,
}

impl Plane {
    /// Bytes per element (`components` × `component_bytes`).
    pub fn element_bytes(&self) -> u64 {
        self.components as u64 * self.component_bytes as u64
    }

    /// Bytes of a tight row: the smallest stride a header may give the plane.
    pub fn row_bytes(&self) -> u64 {
        self.columns as u64 * self.element_bytes()
    }

    /// Bytes of the plane with tight rows.
    pub fn bytes(&self) -> u64 {
        self.row_bytes() * self.rows as u64
    }
}

/// The planes of a frame of one format at one size ([`Format::plane_table`]): a
/// slice of 1 to 3 [`Plane`]s, in the order they are laid out. Allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneTable {
    planes: [Plane; 3],
    len: usize,
}

impl PlaneTable {
    /// Bytes of every plane with tight rows, no padding between them.
    pub fn bytes(&self) -> u64 {
        self.iter().map(Plane::bytes).sum()
    }
}

impl Deref for PlaneTable {
    type Target = [Plane];

    fn deref(&self) -> &[Plane] {
        &self.planes[..self.len]
    }
}
