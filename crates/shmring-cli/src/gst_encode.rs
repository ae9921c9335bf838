//! `record --encode` in process: video frames go from the ring into an H.264
//! encoder in a GStreamer pipeline of this process (`appsrc ! x264enc ! mp4mux !
//! filesink`), with no pipe and no child process.
//!
//! The recorder is the ring's one consumer (it records every stream, audio too),
//! and releases each record when it returns, while the encoder keeps frames for
//! its look-ahead. So each frame is copied once, in this process, from the ring
//! into a buffer of a bounded pool that the encoder reads (x264 copies every input
//! picture into its own frames anyway). The encoder's input queue is bounded
//! (`appsrc` blocks when full), so a slow encoder makes the recorder wait, as a
//! full pipe did.

use std::io;
use std::path::Path;

use gst::prelude::*;
use gst_video::prelude::*;
use shmring::media::{Format, MediaHeader};

/// Frames the pool keeps ready. It is not bounded: the encoder holds as many
/// input frames as its look-ahead needs (16 at this preset), and a bounded pool
/// smaller than that would stall it; the pool stops growing at that depth.
const POOL_FRAMES: u32 = 4;

/// An H.264 MP4 encoder fed frame by frame.
pub struct Encoder {
    pipeline: gst::Pipeline,
    appsrc: gst_app::AppSrc,
    fps: (u32, u32),
    /// Set on the first frame (the format is known then).
    video: Option<(gst_video::VideoInfo, gst::BufferPool)>,
    frames: u64,
}

fn err(what: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("GStreamer encoder: {what}"))
}

impl Encoder {
    /// An encoder writing `path` (an MP4 file).
    pub fn new(path: &Path, fps: (u32, u32)) -> io::Result<Encoder> {
        gst::init().map_err(err)?;
        let pipeline = gst::Pipeline::new();
        let appsrc = gst_app::AppSrc::builder()
            .format(gst::Format::Time)
            .block(true)
            .is_live(false)
            .build();
        let make = |name: &str| {
            gst::ElementFactory::make(name).build().map_err(|_| {
                err(format!(
                    "element {name} is missing (install the GStreamer plugin sets: base, good, ugly)"
                ))
            })
        };
        let enc = make("x264enc")?;
        // Constant quality 20 at the veryfast preset, as `ffmpeg -crf 20 -preset veryfast`.
        enc.set_property_from_str("speed-preset", "veryfast");
        enc.set_property_from_str("pass", "qual");
        enc.set_property("quantizer", 20u32);
        let mux = make("mp4mux")?;
        let sink = make("filesink")?;
        sink.set_property("location", path.to_string_lossy().as_ref());
        pipeline
            .add_many([appsrc.upcast_ref(), &enc, &mux, &sink])
            .map_err(err)?;
        gst::Element::link_many([appsrc.upcast_ref(), &enc, &mux, &sink]).map_err(err)?;
        pipeline.set_state(gst::State::Playing).map_err(err)?;
        Ok(Encoder {
            pipeline,
            appsrc,
            fps,
            video: None,
            frames: 0,
        })
    }

    fn setup(&mut self, hd: &MediaHeader) -> io::Result<()> {
        let format = match hd.format {
            Format::I420 => gst_video::VideoFormat::I420,
            Format::Nv12 => gst_video::VideoFormat::Nv12,
            f => return Err(err(format!("{} cannot be encoded", f.name()))),
        };
        let info = gst_video::VideoInfo::builder(format, hd.width, hd.height)
            .fps(gst::Fraction::new(self.fps.0 as i32, self.fps.1 as i32))
            .build()
            .map_err(err)?;
        let caps = info.to_caps().map_err(err)?;
        self.appsrc.set_caps(Some(&caps));
        let pool = gst_video::VideoBufferPool::new();
        let mut config = pool.config();
        config.set_params(Some(&caps), info.size() as u32, POOL_FRAMES, 0);
        pool.set_config(config).map_err(err)?;
        pool.set_active(true).map_err(err)?;
        self.video = Some((info, pool.upcast()));
        Ok(())
    }

    /// Encodes one frame (planes as the header describes them, inside `payload`).
    pub fn push(&mut self, hd: &MediaHeader, payload: &[u8]) -> io::Result<()> {
        if self.video.is_none() {
            self.setup(hd)?;
        }
        let (info, pool) = self.video.as_ref().expect("set up above");
        if info.width() != hd.width || info.height() != hd.height {
            return Err(err("frame size changed within one file"));
        }
        let buffer = pool.acquire_buffer(None).map_err(err)?;
        let mut frame = gst_video::VideoFrame::from_buffer_writable(buffer, info)
            .map_err(|_| err("cannot map a pool buffer"))?;
        for p in 0..info.n_planes() as usize {
            // Plane p holds component p (Y, U, V; or Y, UV interleaved).
            let rows = info.comp_height(p as u8) as usize;
            let row = info.comp_width(p as u8) as usize * info.comp_pstride(p as u8) as usize;
            let src = hd.plane(payload, p);
            let (src_stride, dst_stride) =
                (hd.stride[p] as usize, frame.plane_stride()[p] as usize);
            let dst = frame.plane_data_mut(p as u32).map_err(err)?;
            for r in 0..rows {
                dst[r * dst_stride..r * dst_stride + row]
                    .copy_from_slice(&src[r * src_stride..r * src_stride + row]);
            }
        }
        let mut buffer = frame.into_buffer();
        {
            let b = buffer.get_mut().expect("a pool buffer is ours");
            let at = |n: u64| {
                gst::ClockTime::SECOND.mul_div_floor(n * self.fps.1 as u64, self.fps.0 as u64)
            };
            b.set_pts(at(self.frames));
            b.set_duration(at(self.frames + 1).zip(at(self.frames)).map(|(b, a)| b - a));
        }
        self.frames += 1;
        self.appsrc
            .push_buffer(buffer)
            .map_err(|e| err(format!("the encoder stopped ({e:?}){}", self.bus_error())))?;
        Ok(())
    }

    fn bus_error(&self) -> String {
        let Some(bus) = self.pipeline.bus() else {
            return String::new();
        };
        while let Some(m) = bus.pop_filtered(&[gst::MessageType::Error]) {
            if let gst::MessageView::Error(e) = m.view() {
                return format!(": {}", e.error());
            }
        }
        String::new()
    }

    /// Ends the stream and waits for the file to be complete.
    pub fn finish(self) -> io::Result<()> {
        let r = self.end();
        let _ = self.pipeline.set_state(gst::State::Null);
        r
    }

    fn end(&self) -> io::Result<()> {
        if self.frames == 0 {
            return Err(err("no frame to encode"));
        }
        self.appsrc
            .end_of_stream()
            .map_err(|e| err(format!("{e:?}")))?;
        let bus = self.pipeline.bus().expect("a pipeline has a bus");
        let msg = bus
            .timed_pop_filtered(
                gst::ClockTime::NONE,
                &[gst::MessageType::Eos, gst::MessageType::Error],
            )
            .ok_or_else(|| err("no end of stream"))?;
        match msg.view() {
            gst::MessageView::Error(e) => Err(err(e.error())),
            _ => Ok(()),
        }
    }
}
