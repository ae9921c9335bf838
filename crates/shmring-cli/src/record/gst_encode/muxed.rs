//! One MP4 being written: its video and audio tracks, their shapes (a change
//! starts the next part), the pipeline that encodes and muxes them.

use super::*;

/// The video track's shape: what must stay the same within one file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct VideoShape {
    pub(crate) format: Format,
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) fps: (u32, u32),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct AudioShape {
    pub(crate) format: Format,
    pub(crate) rate: u32,
    pub(crate) channels: u32,
}

pub(crate) fn video_shape(hd: &MediaHeader) -> VideoShape {
    VideoShape {
        format: hd.format,
        width: hd.width,
        height: hd.height,
        fps: (hd.fps_num, hd.fps_den),
    }
}

pub(crate) fn audio_shape(hd: &MediaHeader) -> AudioShape {
    AudioShape {
        format: hd.format,
        rate: hd.sample_rate,
        channels: hd.channels,
    }
}

pub(crate) struct VideoTrack {
    pub(crate) appsrc: gst_app::AppSrc,
    pub(crate) shape: VideoShape,
    pub(crate) info: gst_video::VideoInfo,
    pub(crate) pool: gst::BufferPool,
    /// PTS and duration of the last frame pushed.
    pub(crate) last: Option<(gst::ClockTime, gst::ClockTime)>,
    pub(crate) ended: bool,
    /// The queue's level (bytes) when the encoder was found to take no frame: it
    /// is taken as stuck until the level goes below.
    pub(crate) stuck_at: Option<u64>,
}

pub(crate) struct AudioTrack {
    pub(crate) appsrc: gst_app::AppSrc,
    pub(crate) shape: AudioShape,
    /// A pool of packet-sized buffers, made for the first packet's size.
    pub(crate) pool: Option<(usize, gst::BufferPool)>,
    pub(crate) ended: bool,
    /// What the encoder puts before the first sample (see [`AUDIO_ENCODERS`]).
    pub(crate) priming: gst::ClockTime,
}

/// One MP4 being written.
pub(crate) struct Muxed {
    pub(crate) pipeline: gst::Pipeline,
    pub(crate) video: Option<VideoTrack>,
    pub(crate) audio: Option<AudioTrack>,
    /// Capture time of the file's start.
    pub(crate) t0: u64,
    pub(crate) tmp: PathBuf,
    pub(crate) path: PathBuf,
    pub(crate) frames: u64,
    pub(crate) samples: u64,
    /// Video frames dropped: the encoder's queue was full.
    pub(crate) dropped: u64,
    pub(crate) failed: Option<String>,
}

pub(crate) fn part_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

impl Muxed {
    pub(crate) fn new(
        path: PathBuf,
        video: Option<VideoShape>,
        audio: Option<AudioShape>,
        t0: u64,
        preset: &str,
    ) -> io::Result<Muxed> {
        gst::init().map_err(err)?;
        let tmp = part_path(&path);
        let pipeline = gst::Pipeline::new();
        let mux = make("mp4mux")?;
        // A fragment a second: the file plays up to its last whole fragment if cut.
        mux.set_property("fragment-duration", 1000u32);
        let sink = make("filesink")?;
        sink.set_property("location", tmp.to_string_lossy().as_ref());
        pipeline.add_many([&mux, &sink]).map_err(err)?;
        mux.link(&sink).map_err(err)?;
        let video = match video {
            Some(shape) => Some(Self::video_track(&pipeline, &mux, shape, preset)?),
            None => None,
        };
        let audio = match audio {
            Some(shape) => Some(Self::audio_track(&pipeline, &mux, shape)?),
            None => None,
        };
        // Every thread of the pipeline (and x264's, which inherit it) runs below
        // the thread that reads the ring, so encoders that fall behind take what
        // CPU is left and drop frames, and never slow the reading.
        if let Some(bus) = pipeline.bus() {
            bus.set_sync_handler(|_, m| {
                if let gst::MessageView::StreamStatus(s) = m.view() {
                    if s.type_() == gst::StreamStatusType::Enter {
                        lower_this_thread();
                    }
                }
                gst::BusSyncReply::Pass
            });
        }
        pipeline.set_state(gst::State::Playing).map_err(err)?;
        Ok(Muxed {
            pipeline,
            video,
            audio,
            t0,
            tmp,
            path,
            frames: 0,
            samples: 0,
            dropped: 0,
            failed: None,
        })
    }

    pub(crate) fn video_track(
        pipeline: &gst::Pipeline,
        mux: &gst::Element,
        shape: VideoShape,
        preset: &str,
    ) -> io::Result<VideoTrack> {
        let format = match shape.format {
            Format::I420 => gst_video::VideoFormat::I420,
            Format::Nv12 => gst_video::VideoFormat::Nv12,
            f => return Err(err(format!("{} video cannot be encoded", f.name()))),
        };
        // 0/1: a variable frame rate; the timestamps time every frame.
        let fps = if shape.fps.0 == 0 {
            gst::Fraction::new(0, 1)
        } else {
            gst::Fraction::new(shape.fps.0 as i32, shape.fps.1 as i32)
        };
        let info = gst_video::VideoInfo::builder(format, shape.width, shape.height)
            .fps(fps)
            .build()
            .map_err(err)?;
        let caps = info.to_caps().map_err(err)?;
        // Two seconds of frames at the nominal rate (of a variable rate: at 30
        // fps), never fewer than 60: an encoder descheduled for a moment on a busy
        // host loses nothing, and a participant's first records (half a second)
        // go in at once.
        let max_frames = match shape.fps {
            (0, _) => 60,
            (n, d) => (2 * n as u64).div_ceil(d.max(1) as u64).max(60),
        };
        let appsrc = timed_source(&caps)
            .max_bytes(VIDEO_QUEUE_BYTES)
            .max_buffers(max_frames)
            .build();
        let enc = make("x264enc")?;
        // Constant quality 20 at the preset (veryfast by default), as `ffmpeg -crf
        // 20 -preset veryfast`; no B-frames (the video track starts at its first
        // frame, with no reordering delay to offset), a key frame at least every 2 s.
        enc.set_property_from_str("speed-preset", preset);
        enc.set_property_from_str("pass", "qual");
        enc.set_property("quantizer", 20u32);
        enc.set_property("bframes", 0u32);
        let keyint = if shape.fps.0 == 0 {
            60
        } else {
            (2 * shape.fps.0 / shape.fps.1.max(1)).clamp(1, 600)
        };
        enc.set_property("key-int-max", keyint);
        let parse = make("h264parse")?;
        pipeline
            .add_many([appsrc.upcast_ref(), &enc, &parse])
            .map_err(err)?;
        gst::Element::link_many([appsrc.upcast_ref(), &enc, &parse]).map_err(err)?;
        let pad = mux
            .request_pad_simple("video_%u")
            .ok_or_else(|| err("mp4mux gave no video pad"))?;
        // The track's clock: mp4mux derives one from the nominal rate, which is 0
        // (an unplayable track) for rates below 1 frame per second; frames are
        // timed by their capture times anyway.
        pad.set_property("trak-timescale", VIDEO_TIMESCALE);
        parse
            .static_pad("src")
            .expect("h264parse has a src pad")
            .link(&pad)
            .map_err(err)?;
        let pool = gst_video::VideoBufferPool::new();
        let mut config = pool.config();
        config.set_params(Some(&caps), info.size() as u32, 2, 0);
        pool.set_config(config).map_err(err)?;
        pool.set_active(true).map_err(err)?;
        Ok(VideoTrack {
            appsrc,
            shape,
            info,
            pool: pool.upcast(),
            last: None,
            ended: false,
            stuck_at: None,
        })
    }

    pub(crate) fn audio_track(
        pipeline: &gst::Pipeline,
        mux: &gst::Element,
        shape: AudioShape,
    ) -> io::Result<AudioTrack> {
        let format = match shape.format {
            Format::PcmS16 => gst_audio::AudioFormat::S16le,
            Format::PcmF32 => gst_audio::AudioFormat::F32le,
            f => return Err(err(format!("{} audio cannot be encoded", f.name()))),
        };
        let info = gst_audio::AudioInfo::builder(format, shape.rate, shape.channels)
            .layout(gst_audio::AudioLayout::Interleaved)
            .build()
            .map_err(err)?;
        let caps = info.to_caps().map_err(err)?;
        // Unbounded: the muxer waits for both tracks, so the recorder must never
        // wait for audio while the video it would push next is what the muxer needs.
        let appsrc = timed_source(&caps).max_bytes(0).build();
        let rate = make("audiorate")?;
        rate.set_property("tolerance", AUDIO_TOLERANCE_NS);
        let convert = make("audioconvert")?;
        let resample = make("audioresample")?;
        let (enc, priming) = AUDIO_ENCODERS
            .iter()
            .find_map(|(n, priming)| {
                let e = gst::ElementFactory::make(n).build().ok()?;
                Some((e, *priming))
            })
            .ok_or_else(no_audio_encoder)?;
        let chain = [appsrc.upcast_ref(), &rate, &convert, &resample, &enc];
        pipeline.add_many(chain).map_err(err)?;
        gst::Element::link_many(chain).map_err(err)?;
        let pad = mux
            .request_pad_simple("audio_%u")
            .ok_or_else(|| err("mp4mux gave no audio pad"))?;
        enc.static_pad("src")
            .expect("an encoder has a src pad")
            .link(&pad)
            .map_err(err)?;
        Ok(AudioTrack {
            appsrc,
            shape,
            pool: None,
            ended: false,
            priming: gst::ClockTime::SECOND
                .mul_div_round(priming, shape.rate as u64)
                .unwrap_or(gst::ClockTime::ZERO),
        })
    }

    /// The first error on the bus, if one came (the file cannot go on).
    pub(crate) fn check(&mut self) -> io::Result<()> {
        if self.failed.is_none() {
            if let Some(bus) = self.pipeline.bus() {
                if let Some(m) = bus.pop_filtered(&[gst::MessageType::Error]) {
                    if let gst::MessageView::Error(e) = m.view() {
                        self.failed = Some(e.error().to_string());
                    }
                }
            }
        }
        match &self.failed {
            Some(f) => Err(io::Error::other(format!("{}: {f}", self.tmp.display()))),
            None => Ok(()),
        }
    }

    pub(crate) fn pts(&self, capture_ns: u64) -> gst::ClockTime {
        gst::ClockTime::from_nseconds(capture_ns.saturating_sub(self.t0))
    }

    /// Is there room in the video encoder's queue for a frame captured at
    /// `capture_ns`? A live frame (captured by now) never waits: waiting would
    /// only make every record behind it later, and hold the ring; it finds room or
    /// is dropped. A frame stamped ahead of the clock (records written faster than
    /// real time, which can wait) waits while the encoder takes frames, and is
    /// dropped once it takes none for [`ENCODER_STUCK`] with the audio queue
    /// empty (its muxer waiting for audio, which is in the ring behind this
    /// frame), as are the frames after it until it takes one again.
    pub(crate) fn room_for_video(&mut self, capture_ns: u64) -> io::Result<bool> {
        let live = capture_ns <= shmring::now_ns();
        let v = self.video.as_mut().expect("checked by the caller");
        let size = v.info.size() as u64;
        let full = |v: &VideoTrack| {
            v.appsrc.current_level_bytes() + size > VIDEO_QUEUE_BYTES
                || v.appsrc.current_level_buffers() >= v.appsrc.max_buffers()
        };
        if !full(v) {
            v.stuck_at = None;
            return Ok(true);
        }
        if live {
            return self.check().map(|()| false);
        }
        let (mut level, mut moved) = (v.appsrc.current_level_bytes(), Instant::now());
        if let Some(at) = v.stuck_at {
            if level >= at {
                return self.check().map(|()| false);
            }
        }
        loop {
            self.check()?;
            // The muxer waits for audio that has not come: it is in the ring,
            // behind this frame.
            let starved = self
                .audio
                .as_ref()
                .is_some_and(|a| !a.ended && a.appsrc.current_level_buffers() == 0);
            let v = self.video.as_mut().expect("checked by the caller");
            if !full(v) {
                v.stuck_at = None;
                return Ok(true);
            }
            let now = v.appsrc.current_level_bytes();
            if now < level {
                (level, moved) = (now, Instant::now());
            } else if starved && moved.elapsed() >= ENCODER_STUCK {
                v.stuck_at = Some(now);
                return Ok(false);
            } else if moved.elapsed() >= ENCODER_WAIT {
                return Err(err("the video encoder took no frame for 60 s"));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Pushes a frame to the encoder; false when its queue was full (the frame is
    /// dropped and counted).
    pub(crate) fn push_video(
        &mut self,
        capture_ns: u64,
        hd: &MediaHeader,
        payload: &[u8],
    ) -> io::Result<bool> {
        let mut pts = self.pts(capture_ns);
        if !self.room_for_video(capture_ns)? {
            self.dropped += 1;
            return Ok(false);
        }
        let v = self.video.as_mut().expect("checked by the caller");
        let buffer = v.pool.acquire_buffer(None).map_err(err)?;
        let mut frame = gst_video::VideoFrame::from_buffer_writable(buffer, &v.info)
            .map_err(|_| err("cannot map a pool buffer"))?;
        for (p, plane) in hd.plane_table().iter().enumerate() {
            // The core's planes (Y, U, V; or Y, UV interleaved) are GStreamer's.
            let (rows, row) = (plane.rows as usize, plane.row_bytes() as usize);
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
        // The muxer starts every track at the file's start: a first frame captured
        // after it (its participant's audio came first) is shown from the start,
        // as a player shows a first frame, so that every frame keeps its time.
        let lead = if v.last.is_none() {
            pts
        } else {
            gst::ClockTime::ZERO
        };
        // Frames keep their order, a track tick apart at least: a capture time at or
        // before the previous one (a producer that started again), or within
        // [`MIN_FRAME_GAP`] of it (a late producer catching up), is moved after it,
        // so no two frames share a timestamp in the file.
        if let Some((last, _)) = v.last {
            if pts < last + MIN_FRAME_GAP {
                pts = last + MIN_FRAME_GAP;
            }
        }
        let duration = match v.shape.fps {
            (0, _) => v
                .last
                .map(|(last, d)| pts.checked_sub(last).unwrap_or(d))
                .unwrap_or(gst::ClockTime::from_mseconds(33)),
            (n, d) => gst::ClockTime::SECOND
                .mul_div_floor(d as u64, n as u64)
                .unwrap_or(gst::ClockTime::from_mseconds(33)),
        };
        {
            let b = buffer.get_mut().expect("a pool buffer is ours");
            b.set_pts(pts - lead);
            b.set_duration(duration + lead);
        }
        v.last = Some((pts, duration));
        v.appsrc
            .push_buffer(buffer)
            .map_err(|e| err(format!("the video encoder stopped ({e:?})")))?;
        self.frames += 1;
        self.check().map(|()| true)
    }

    pub(crate) fn push_audio(
        &mut self,
        capture_ns: u64,
        hd: &MediaHeader,
        payload: &[u8],
    ) -> io::Result<()> {
        let a = self.audio.as_mut().expect("checked by the caller");
        let rate = a.shape.rate as u64;
        // The encoder's priming plays before the first sample given: each sample
        // goes in that much earlier than it was captured, so it plays when it was
        // captured; the samples that would go in before the file's start are cut.
        let at = (capture_ns as i128 - self.t0 as i128 - a.priming.nseconds() as i128)
            .max(i64::MIN as i128);
        let skip = if at < 0 {
            ((-at) as u128 * rate as u128).div_ceil(1_000_000_000) as usize
        } else {
            0
        };
        if skip >= hd.samples as usize {
            return Ok(());
        }
        let pts = gst::ClockTime::from_nseconds(
            (at + (skip as u128 * 1_000_000_000 / rate as u128) as i128).max(0) as u64,
        );
        let plane = hd.plane(payload, 0);
        let samples = hd.plane_table()[0];
        let frame = samples.row_bytes() as usize;
        let (count, bytes) = (
            hd.samples as usize - skip,
            (hd.samples as usize - skip) * frame,
        );
        if a.pool.is_none() {
            let pool = gst::BufferPool::new();
            let mut config = pool.config();
            config.set_params(None, bytes as u32, 2, 0);
            pool.set_config(config).map_err(err)?;
            pool.set_active(true).map_err(err)?;
            a.pool = Some((bytes, pool));
        }
        let mut buffer = match &a.pool {
            Some((size, pool)) if *size == bytes => pool.acquire_buffer(None).map_err(err)?,
            _ => gst::Buffer::with_size(bytes).map_err(err)?,
        };
        {
            let b = buffer.get_mut().expect("a new buffer is ours");
            {
                let mut map = b.map_writable().map_err(err)?;
                let stride = hd.stride[0] as usize;
                if stride == frame {
                    map.copy_from_slice(&plane[skip * frame..skip * frame + bytes]);
                } else {
                    for s in 0..count {
                        let from = (skip + s) * stride;
                        map[s * frame..(s + 1) * frame].copy_from_slice(&plane[from..from + frame]);
                    }
                }
            }
            b.set_pts(pts);
            b.set_duration(gst::ClockTime::SECOND.mul_div_floor(count as u64, rate));
        }
        a.appsrc
            .push_buffer(buffer)
            .map_err(|e| err(format!("the audio encoder stopped ({e:?})")))?;
        self.samples += count as u64;
        self.check()
    }

    /// Ends one track (`k`); true once every track has ended.
    pub(crate) fn end(&mut self, k: u32) -> bool {
        if k == kind::VIDEO {
            if let Some(v) = self.video.as_mut().filter(|v| !v.ended) {
                let _ = v.appsrc.end_of_stream();
                v.ended = true;
            }
        } else if let Some(a) = self.audio.as_mut().filter(|a| !a.ended) {
            let _ = a.appsrc.end_of_stream();
            a.ended = true;
        }
        self.video.as_ref().is_none_or(|v| v.ended) && self.audio.as_ref().is_none_or(|a| a.ended)
    }

    /// Ends every track.
    pub(crate) fn end_all(&mut self) {
        self.end(kind::VIDEO);
        self.end(kind::AUDIO);
    }

    /// Has the muxer finished (EOS) or failed? Waits up to `wait`.
    pub(crate) fn done(&mut self, wait: gst::ClockTime) -> Option<Result<(), String>> {
        if let Some(f) = &self.failed {
            return Some(Err(f.clone()));
        }
        let bus = self.pipeline.bus()?;
        let types = [gst::MessageType::Eos, gst::MessageType::Error];
        // (A zero timeout must not go through timed_pop_filtered, which gives up
        // before it looks.)
        let m = if wait.is_zero() {
            bus.pop_filtered(&types)?
        } else {
            bus.timed_pop_filtered(wait, &types)?
        };
        Some(match m.view() {
            gst::MessageView::Error(e) => {
                let f = e.error().to_string();
                self.failed = Some(f.clone());
                Err(f)
            }
            _ => Ok(()),
        })
    }

    /// Stops the pipeline and names the file: renamed when the muxer finished it,
    /// left under `.part` otherwise (readable up to its last whole fragment).
    pub(crate) fn close(self, outcome: Result<(), String>, note: Option<String>) -> FileReport {
        let _ = self.pipeline.set_state(gst::State::Null);
        let bytes = std::fs::metadata(&self.tmp).map(|m| m.len()).unwrap_or(0);
        let mut report = FileReport {
            path: self.path.clone(),
            units: self.frames,
            bytes,
            note,
            writes: WriteCounters::default(),
        };
        match outcome {
            Ok(()) => {
                if let Err(e) = std::fs::rename(&self.tmp, &self.path) {
                    report.note = Some(format!(
                        "renaming {} to {}: {e}",
                        self.tmp.display(),
                        self.path.display()
                    ));
                }
            }
            Err(e) => {
                report.path = self.tmp.clone();
                report.note = Some(format!(
                    "{e}; the file ends early: it plays up to its last whole fragment"
                ));
            }
        }
        report
    }

    /// Ends every track and waits for the file to be finished.
    pub(crate) fn finish(mut self, note: Option<String>) -> FileReport {
        self.end_all();
        let outcome = self
            .done(gst::ClockTime::from_seconds(ENCODER_WAIT.as_secs()))
            .unwrap_or_else(|| Err("the encoder did not finish the file within 60 s".into()));
        self.close(outcome, note)
    }
}
