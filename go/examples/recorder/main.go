// Command recorder is a Go consumer that records what producers write into a ring
// to files: video-STREAM.y4m (I420) and audio-STREAM.wav (16-bit or float PCM).
//
//	recorder -listen /tmp/cam0.sock -out rec/ -seconds 10   # a memfd ring served on a socket
//	recorder -ring cam0 -out rec/                           # a named ring, /dev/shm/cam0
//
// Producers: `shmring produce --connect /tmp/cam0.sock` (or `--ring cam0`), or the
// producer example. With -listen the ring has an eventfd and the recorder's
// goroutine waits in Go's netpoller. Frames go from the ring through one 64 KiB
// bufio.Writer per file, and the kernel sees writes of at most 64 KiB; nothing is
// allocated per frame. Files are written as
// NAME.part and renamed when finished: at the stream's end-of-stream record (a
// stream that starts again goes on in video-STREAM-2.y4m, ...), at -seconds,
// SIGINT or SIGTERM. The Y4M frame rate is the producer's nominal rate, or -fps
// for a variable-rate stream. A line
// "ready NAME" on stdout says the ring exists; the last line is a JSON summary
// (frames, packets, writes, the peak of RssAnon, CPU time).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"shmring"
)

// bufSize is the one buffer each file has: the kernel sees 64 KiB writes.
const bufSize = 64 << 10

func main() {
	ring := flag.String("ring", "", "create this named ring (/dev/shm/NAME; removed at exit)")
	listen := flag.String("listen", "", "create a memfd ring and serve it on this Unix socket")
	out := flag.String("out", "", "directory for the files (created if missing)")
	seconds := flag.Float64("seconds", 0, "stop after this many seconds (0: at SIGINT/SIGTERM)")
	fps := flag.Int("fps", 30, "frame rate written into the Y4M headers")
	capMiB := flag.Uint64("capacity-mib", 0, "ring capacity in MiB, a power of two (0: the library's default)")
	flag.Parse()
	if (*ring == "") == (*listen == "") || *out == "" || *fps <= 0 || *seconds < 0 {
		fmt.Fprintln(os.Stderr, "usage: recorder (-ring NAME | -listen PATH) -out DIR [-seconds S] [-fps N] [-capacity-mib N]")
		os.Exit(2)
	}
	if err := run(*ring, *listen, *out, *seconds, *fps, *capMiB); err != nil {
		fmt.Fprintln(os.Stderr, "recorder:", err)
		os.Exit(1)
	}
}

type key struct {
	kind   shmring.Kind
	stream uint32
}

type summary struct {
	Frames        uint64   `json:"frames"`
	Packets       uint64   `json:"packets"`
	Samples       uint64   `json:"samples"`
	Skipped       uint64   `json:"skipped"`
	Ended         uint64   `json:"ended"`
	Writes        uint64   `json:"writes"`
	BytesWritten  uint64   `json:"bytes_written"`
	AvgWriteBytes uint64   `json:"avg_write_bytes"`
	MaxWriteBytes uint64   `json:"max_write_bytes"`
	DropsFull     uint64   `json:"drops_full"`
	RssAnonPeakKB uint64   `json:"rss_anon_peak_kib"`
	CPUUserS      float64  `json:"cpu_user_s"`
	CPUSysS       float64  `json:"cpu_sys_s"`
	Files         []string `json:"files"`
	Notes         []string `json:"notes,omitempty"`
}

func run(ring, listen, dir string, seconds float64, fps int, capMiB uint64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := shmring.DefaultConfig()
	// A ring served on a socket hands producers its eventfd with it, and the
	// recorder's goroutine waits in Go's netpoller. A named ring is opened by name,
	// which carries no eventfd: there the recorder waits in the library (one thread).
	cfg.Eventfd = listen != ""
	if capMiB > 0 {
		cfg.Capacity = capMiB << 20
	}
	var seg *shmring.Segment
	var err error
	name := ring
	if ring != "" {
		seg, err = shmring.Create("create:"+ring, &cfg)
	} else {
		seg, err = shmring.Create("memfd:recorder", &cfg)
		name = listen
	}
	if err != nil {
		return err
	}
	defer seg.Close()
	c, err := seg.Consumer(nil)
	if err != nil {
		return err
	}
	defer c.Close()
	if listen != "" {
		l, err := shmring.Listen(seg, listen, nil)
		if err != nil {
			return err
		}
		defer l.Close()
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if seconds > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, time.Duration(seconds*float64(time.Second)))
		defer stop()
	}
	var sum summary
	peak := watchRssAnon(ctx)
	fmt.Println("ready", name)

	outs := map[key]*output{}
	parts := map[key]int{} // files a stream has had: an ended stream starting again gets the next
	var f shmring.Frame
	for {
		if err := c.Next(ctx, &f); err != nil {
			if ctx.Err() != nil {
				break // -seconds, SIGINT or SIGTERM: finish the files
			}
			return err
		}
		if err := record(outs, parts, dir, fps, &f, &sum); err != nil {
			f.Release()
			return err
		}
		if err := f.Release(); err != nil {
			return err
		}
	}
	for _, o := range outs {
		finish(o, &sum)
	}
	if sum.Writes > 0 {
		sum.AvgWriteBytes = sum.BytesWritten / sum.Writes
	}
	if st, err := seg.Stats(); err == nil {
		sum.DropsFull, _ = st.Get("drops_full")
	}
	sum.RssAnonPeakKB = peak()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		sum.CPUUserS = float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6
		sum.CPUSysS = float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6
	}
	js, _ := json.Marshal(sum)
	fmt.Println(string(js))
	return nil
}

// finish completes a stream's file and counts its writes.
func finish(o *output, sum *summary) {
	path, err := o.finish()
	if err != nil {
		sum.Notes = append(sum.Notes, err.Error())
	}
	sum.Files = append(sum.Files, path)
	sum.Writes += o.w.calls
	sum.BytesWritten += o.w.bytes
	if o.w.max > sum.MaxWriteBytes {
		sum.MaxWriteBytes = o.w.max
	}
}

// record writes one frame to its stream's file, opening it at the stream's first;
// a stream's end-of-stream record finishes its file.
func record(outs map[key]*output, parts map[key]int, dir string, fps int, f *shmring.Frame, sum *summary) error {
	k := key{f.Kind(), f.Stream()}
	if k.kind != shmring.KindVideo && k.kind != shmring.KindAudio {
		sum.Skipped++
		return nil
	}
	m, err := f.Media()
	if err != nil {
		sum.Skipped++ // a malformed header: the library says why; the record is dropped
		return nil
	}
	o := outs[k]
	if m.EndOfStream() {
		sum.Ended++
		if o != nil {
			finish(o, sum)
			delete(outs, k)
		}
		return nil
	}
	if o == nil {
		parts[k]++
		if o, err = open(dir, k, parts[k], &m, fps); err != nil {
			return err
		}
		if o == nil {
			sum.Skipped++
			if len(sum.Notes) < 16 {
				sum.Notes = append(sum.Notes, fmt.Sprintf("stream %d: format %v is not recorded", k.stream, m.Format))
			}
			return nil
		}
		outs[k] = o
	}
	if !o.fits(&m) {
		sum.Skipped++ // the stream changed size or format mid-file
		return nil
	}
	if k.kind == shmring.KindVideo {
		sum.Frames++
		return o.video(f, &m)
	}
	sum.Packets++
	sum.Samples += uint64(m.Samples)
	return o.audio(f, &m)
}

// counting is the file under the buffer: it writes at most bufSize bytes a call
// (bufio hands a plane larger than its free room straight from the ring, and it
// goes to the kernel in bufSize pieces, still without a copy) and counts the calls.
type counting struct {
	f                 *os.File
	calls, bytes, max uint64
}

func (c *counting) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		chunk := p[done:]
		if len(chunk) > bufSize {
			chunk = chunk[:bufSize]
		}
		n, err := c.f.Write(chunk)
		c.calls++
		c.bytes += uint64(n)
		if uint64(n) > c.max {
			c.max = uint64(n)
		}
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

type output struct {
	path  string
	file  *os.File
	w     *counting
	buf   *bufio.Writer
	media shmring.Media
	unit  int    // audio: bytes per sample frame in the file
	units uint64 // audio: sample frames written
}

// open starts part `part` (1, 2, ...) of a stream's file: video-0.y4m, then
// video-0-2.y4m after the stream ended and started again.
func open(dir string, k key, part int, m *shmring.Media, fps int) (*output, error) {
	var name, ext string
	switch {
	case k.kind == shmring.KindVideo && m.Format == shmring.FormatI420:
		name, ext = fmt.Sprintf("video-%d", k.stream), "y4m"
	case k.kind == shmring.KindAudio && (m.Format == shmring.FormatPCMS16 || m.Format == shmring.FormatPCMF32):
		name, ext = fmt.Sprintf("audio-%d", k.stream), "wav"
	default:
		return nil, nil
	}
	if part > 1 {
		name = fmt.Sprintf("%s-%d", name, part)
	}
	name += "." + ext
	path := filepath.Join(dir, name)
	file, err := os.Create(path + ".part")
	if err != nil {
		return nil, err
	}
	o := &output{path: path, file: file, w: &counting{f: file}, media: *m}
	o.buf = bufio.NewWriterSize(o.w, bufSize)
	if k.kind == shmring.KindVideo {
		// The producer's nominal rate, where it gives one; else -fps.
		num, den := uint32(fps), uint32(1)
		if m.FpsNum > 0 && m.FpsDen > 0 {
			num, den = m.FpsNum, m.FpsDen
		}
		_, err = fmt.Fprintf(o.buf, "YUV4MPEG2 W%d H%d F%d:%d Ip A1:1 C420jpeg\n", m.Width, m.Height, num, den)
	} else {
		o.unit = int(m.Channels) * sampleBytes(m.Format)
		_, err = o.buf.Write(o.wavHeader())
	}
	if err != nil {
		file.Close()
		return nil, err
	}
	return o, nil
}

func sampleBytes(f shmring.Format) int {
	if f == shmring.FormatPCMF32 {
		return 4
	}
	return 2
}

func (o *output) fits(m *shmring.Media) bool {
	return m.Format == o.media.Format && m.Width == o.media.Width && m.Height == o.media.Height &&
		m.SampleRate == o.media.SampleRate && m.Channels == o.media.Channels
}

var frameTag = []byte("FRAME\n")

// video appends one I420 frame: rows straight from the ring's planes.
func (o *output) video(f *shmring.Frame, m *shmring.Media) error {
	if _, err := o.buf.Write(frameTag); err != nil {
		return err
	}
	w, h := int(m.Width), int(m.Height)
	for i := 0; i < 3; i++ {
		pl, err := f.Plane(i)
		if err != nil {
			return err
		}
		pw, ph := w, h
		if i > 0 {
			pw, ph = (w+1)/2, (h+1)/2 // I420 chroma
		}
		if err := o.rows(pl, pw, ph, int(m.Stride[i])); err != nil {
			return err
		}
	}
	return nil
}

// audio appends one packet of interleaved samples.
func (o *output) audio(f *shmring.Frame, m *shmring.Media) error {
	pl, err := f.Plane(0)
	if err != nil {
		return err
	}
	o.units += uint64(m.Samples)
	return o.rows(pl, o.unit, int(m.Samples), int(m.Stride[0]))
}

// rows writes rows of `row` bytes that lie stride bytes apart.
func (o *output) rows(pl []byte, row, rows, stride int) error {
	if stride == row {
		_, err := o.buf.Write(pl[:row*rows])
		return err
	}
	for r := 0; r < rows; r++ {
		if _, err := o.buf.Write(pl[r*stride : r*stride+row]); err != nil {
			return err
		}
	}
	return nil
}

// wavHeader is a RIFF/WAVE header for o.units sample frames.
func (o *output) wavHeader() []byte {
	float := o.media.Format == shmring.FormatPCMF32
	data := uint32(o.units) * uint32(o.unit)
	var b bytes.Buffer
	le := func(v interface{}) { _ = binary.Write(&b, binary.LittleEndian, v) }
	extra := uint32(0)
	if float {
		extra = 12
	}
	b.WriteString("RIFF")
	le(4 + 24 + extra + 8 + data + data&1)
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	if float {
		le(uint16(3))
	} else {
		le(uint16(1))
	}
	le(uint16(o.media.Channels))
	le(o.media.SampleRate)
	le(o.media.SampleRate * uint32(o.unit))
	le(uint16(o.unit))
	le(uint16(8 * sampleBytes(o.media.Format)))
	if float {
		b.WriteString("fact")
		le(uint32(4))
		le(uint32(o.units))
	}
	b.WriteString("data")
	le(data)
	return b.Bytes()
}

// finish flushes, patches a WAV's sizes and renames NAME.part to NAME.
func (o *output) finish() (string, error) {
	err := o.buf.Flush()
	if err == nil && o.unit > 0 {
		_, err = o.file.WriteAt(o.wavHeader(), 0)
	}
	if cerr := o.file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return o.path + ".part", fmt.Errorf("%s: %w (left as .part)", o.path, err)
	}
	return o.path, os.Rename(o.path+".part", o.path)
}

// watchRssAnon samples this process's RssAnon once a second until ctx is done; the
// returned function gives the peak (sampling once more).
func watchRssAnon(ctx context.Context) func() uint64 {
	var mu sync.Mutex
	var peak uint64
	sample := func() {
		if v := rssAnonKB(); v > 0 {
			mu.Lock()
			if v > peak {
				peak = v
			}
			mu.Unlock()
		}
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() uint64 {
		sample()
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

func rssAnonKB() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "RssAnon:" {
			v, _ := strconv.ParseUint(string(f[1]), 10, 64)
			return v
		}
	}
	return 0
}
