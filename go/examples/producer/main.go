// Command producer writes test-pattern video and audio into a ring, each frame
// drawn in place in the ring (reserve, fill the planes, commit): the Go side of a
// capture process.
//
//	producer -connect /tmp/cam0.sock -seconds 10        # a consumer's socket (shmring record --listen)
//	producer -ring cam0 -video 1280x720@30 -audio none  # a named ring (shmring record --create cam0)
//
// Video is I420 on -stream, audio 16-bit PCM in 10 ms packets on the same stream
// id, each paced on the wall clock from one start; -fast does not wait. Exactly
// seconds*fps frames and seconds*100 packets are sent (a late one is sent late);
// a record that finds the ring full past -block-ms is dropped and counted. Each
// stream is ended at the end (Producer.EndStream: readers finish its file there),
// also when a signal stops it early. The picture and sound are the package
// pattern's, so a reader can check every byte. The last line on stdout is a JSON
// summary.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"shmring"
	"shmring/internal/pattern"
)

type result struct {
	Sent    uint64 `json:"sent"`
	Dropped uint64 `json:"dropped"`
	Error   string `json:"error,omitempty"`
}

func main() {
	ring := flag.String("ring", "", "named ring to write into (created by its consumer)")
	connect := flag.String("connect", "", "get the ring from a consumer serving it on this Unix socket")
	video := flag.String("video", "1920x1080@30", `video as WIDTHxHEIGHT@FPS, or "none"`)
	audio := flag.String("audio", "48000x2", `audio as RATExCHANNELS (16-bit PCM, 10 ms packets), or "none"`)
	seconds := flag.Float64("seconds", 10, "how long to produce")
	stream := flag.Uint("stream", 0, "stream id of the records")
	blockMs := flag.Int("block-ms", 1000, "longest wait for space before a record is dropped")
	fast := flag.Bool("fast", false, "do not pace on the wall clock")
	flag.Parse()
	if err := run(*ring, *connect, *video, *audio, *seconds, uint32(*stream), time.Duration(*blockMs)*time.Millisecond, *fast); err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
}

func run(ring, connect, video, audio string, seconds float64, stream uint32, block time.Duration, fast bool) error {
	var w, h, fps, rate, channels uint32
	if video != "none" {
		if n, err := fmt.Sscanf(video, "%dx%d@%d", &w, &h, &fps); n != 3 || err != nil || fps == 0 {
			return fmt.Errorf("-video %q: want WIDTHxHEIGHT@FPS", video)
		}
		if w > pattern.MaxRow {
			return fmt.Errorf("-video %q: at most %d pixels wide", video, pattern.MaxRow)
		}
	}
	if audio != "none" {
		if n, err := fmt.Sscanf(audio, "%dx%d", &rate, &channels); n != 2 || err != nil || rate < 100 {
			return fmt.Errorf("-audio %q: want RATExCHANNELS", audio)
		}
	}
	if seconds <= 0 {
		return fmt.Errorf("-seconds %v: must be positive", seconds)
	}
	var seg *shmring.Segment
	var err error
	switch {
	case ring != "" && connect == "":
		seg, err = shmring.Open(ring, 0)
	case connect != "" && ring == "":
		seg, err = shmring.Open("unix:"+connect, 0)
	default:
		return errors.New("give one of -ring NAME and -connect PATH")
	}
	if err != nil {
		return err
	}
	defer seg.Close()

	var stop atomic.Bool
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; stop.Store(true) }()

	start := time.Now()
	var wg sync.WaitGroup
	var vres, ares result
	if w > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vres = produce(seg, block, &stop, start, time.Second/time.Duration(fps), uint64(seconds*float64(fps)+0.5), fast,
				stream, shmring.KindVideo, func(p *shmring.Producer, n uint64) error { return videoFrame(p, stream, w, h, n) })
		}()
	}
	if rate > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ares = produce(seg, block, &stop, start, 10*time.Millisecond, uint64(seconds*100+0.5), fast,
				stream, shmring.KindAudio, func(p *shmring.Producer, n uint64) error { return audioPacket(p, stream, rate, channels, n) })
		}()
	}
	wg.Wait()
	out, _ := json.Marshal(map[string]result{"video": vres, "audio": ares})
	fmt.Println(string(out))
	if vres.Error != "" || ares.Error != "" {
		return errors.New(vres.Error + ares.Error)
	}
	return nil
}

// produce sends count records of stream and kind, record n due at start +
// n*period, with one producer of its own (one per goroutine), then ends the
// stream.
func produce(seg *shmring.Segment, block time.Duration, stop *atomic.Bool, start time.Time, period time.Duration,
	count uint64, fast bool, stream uint32, kind shmring.Kind, write func(*shmring.Producer, uint64) error) (res result) {
	p, err := seg.Producer()
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer p.Close()
	// Readers end the stream here (its file is finished), however the loop ends.
	defer func() {
		if err := p.EndStream(stream, kind); err != nil && res.Error == "" {
			res.Error = "ending the stream: " + err.Error()
		}
	}()
	if err := p.SetPolicy(shmring.PolicyBlock, block); err != nil {
		res.Error = err.Error()
		return res
	}
	for n := uint64(0); n < count && !stop.Load(); n++ {
		if !fast {
			if d := time.Until(start.Add(time.Duration(n) * period)); d > 0 {
				time.Sleep(d)
			}
		}
		err := write(p, n)
		switch {
		case err == nil:
			res.Sent++
		case errors.Is(err, shmring.ErrTimeout) || errors.Is(err, shmring.ErrFull) || errors.Is(err, shmring.ErrAbandoned):
			res.Dropped++ // the ring was full (counted in its stats too), or reset
		default:
			res.Error = err.Error()
			return res
		}
	}
	return res
}

// videoFrame draws frame n in place: the library lays out the planes.
func videoFrame(p *shmring.Producer, stream, w, h uint32, n uint64) error {
	pts := shmring.NowNs()
	r, err := p.ReserveVideo(shmring.FormatI420, w, h, pts, n)
	if err != nil {
		return err
	}
	m, _ := r.Media() // the planes' strides, as the library laid them out
	for i := 0; i < r.Planes(); i++ {
		pw, ph := int(w), int(h)
		if i > 0 {
			pw, ph = (pw+1)/2, (ph+1)/2 // I420 chroma: half width, half height
		}
		pattern.Fill(r.Plane(i), n, i, pw, ph, int(m.Stride[i]))
	}
	return r.Commit(shmring.Meta{Stream: stream, Kind: shmring.KindVideo, TimestampNs: pts})
}

// audioPacket writes 10 ms of samples in place.
func audioPacket(p *shmring.Producer, stream, rate, channels uint32, n uint64) error {
	pts := shmring.NowNs()
	r, err := p.ReserveAudio(shmring.FormatPCMS16, rate, channels, rate/100, pts, n)
	if err != nil {
		return err
	}
	pattern.Audio(r.Plane(0), n)
	return r.Commit(shmring.Meta{Stream: stream, Kind: shmring.KindAudio, TimestampNs: pts})
}
