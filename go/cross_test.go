package shmring

// Across processes and languages, every byte checked: a Rust producer into a Go
// consumer; a Go producer into a Python consumer; the Go producer example into
// the Rust recorder (`shmring record`) and into the Go recorder example; the Rust
// producer (`shmring produce`) into the Go recorder. Peers: the ring-peer program
// (shmring-testkit) and node/test/py_consumer.py (the checked record of
// record_test.go),
// the `shmring` command, and the Python package in .venv (`make venv`). Children
// are killed and rings removed whatever happens.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"shmring/internal/pattern"
)

// peer is a file of the repository the test needs (a program it drives, a file
// it reads): missing, as outside a built checkout, the test is skipped saying
// what is missing and how to get it, unless SHMRING_GO_REQUIRE_PEERS is set
// (make test-go sets it), which makes it a failure.
func peer(t *testing.T, path, how string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("SHMRING_GO_REQUIRE_PEERS") != "" {
			t.Fatalf("%s is missing: %s", path, how)
		}
		t.Skipf("%s is missing: %s", path, how)
	}
	return path
}

func targetDir() string {
	if d := os.Getenv("CARGO_TARGET_DIR"); d != "" {
		if filepath.IsAbs(d) {
			return d
		}
		return filepath.Join("..", d)
	}
	return filepath.Join("..", "target")
}

func shmringCmd(t *testing.T) string {
	return peer(t, filepath.Join(targetDir(), "release", "shmring"), "cargo build --release -p shmring-cli")
}

func ringPeer(t *testing.T) string {
	return peer(t, filepath.Join(targetDir(), "release", "ring-peer"),
		"cargo build --release -p shmring-testkit --bin ring-peer")
}

func venvPython(t *testing.T) string {
	p := os.Getenv("SHMRING_PYTHON")
	if p == "" {
		p = filepath.Join("..", ".venv", "bin", "python")
	}
	return peer(t, p, "make venv (or set SHMRING_PYTHON)")
}

// The Go examples, built once per test run.
var examples struct {
	once sync.Once
	dir  string
	err  error
}

func example(t *testing.T, name string) string {
	t.Helper()
	examples.once.Do(func() {
		examples.dir, examples.err = os.MkdirTemp("", "shmring-go-examples-")
		if examples.err != nil {
			return
		}
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		cmd := exec.Command(gobin, "build", "-buildvcs=false", "-o", examples.dir+"/", "./examples/producer", "./examples/recorder")
		out, err := cmd.CombinedOutput()
		if err != nil {
			examples.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if examples.err != nil {
		t.Fatal(examples.err)
	}
	return filepath.Join(examples.dir, name)
}

func removeExamples() {
	if examples.dir != "" {
		os.RemoveAll(examples.dir)
	}
}

// spawn starts cmd and kills and reaps it at the end of the test.
func spawn(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState != nil {
			return
		}
		// Asked first, so that it removes what it made; killed if it does not go.
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return cmd
}

// lines reads a child's stdout line by line.
func lines(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	out, err := cmd.StdoutPipe()
	must(t, err)
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

func nextLine(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the child's output ended", what)
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no line in 30 s", what)
	}
	return ""
}

func TestRustProducerIntoGoConsumer(t *testing.T) {
	bin := ringPeer(t)
	s := memfdRing(t, 1<<22, true)
	c, err := s.Consumer(nil)
	must(t, err)
	defer c.Close()
	sock := filepath.Join(t.TempDir(), "ring.sock")
	l, err := Listen(s, sock, nil)
	must(t, err)
	defer l.Close()
	const count = 1000
	cmd := spawn(t, exec.Command(bin, "--connect", sock, fmt.Sprint(count), "200"))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var f Frame
	bytes := 0
	for i := 0; i < count; i++ {
		must(t, c.Next(ctx, &f))
		d := f.Data()
		want := 64 + (i*7919)%65536
		if f.Flags() != uint32(i) || f.Stream() != 1 || len(d) != want || !checked(d) {
			t.Fatalf("record %d: flags %d stream %d, %d bytes (want %d), checksum %v",
				i, f.Flags(), f.Stream(), len(d), want, checked(d))
		}
		if !inside(t, s, d) {
			t.Fatal("a frame outside the ring's mapping")
		}
		bytes += len(d)
		must(t, f.Release())
	}
	must(t, cmd.Wait())
	st, err := s.Stats()
	must(t, err)
	if v, _ := st.Get("records_consumed"); v != count {
		t.Fatalf("records_consumed %d", v)
	}
	if v, _ := st.Get("bytes_consumed"); v != uint64(bytes) {
		t.Fatalf("bytes_consumed %d, received %d", v, bytes)
	}
	if c.parks == 0 {
		t.Fatal("the consumer never waited in the netpoller")
	}
	t.Logf("%d records, %d bytes, %d waits in the netpoller", count, bytes, c.parks)
}

func TestGoProducerIntoPythonConsumer(t *testing.T) {
	py := venvPython(t)
	name := ringName(t)
	const count = 300
	script := peer(t, filepath.Join("..", "node", "test", "py_consumer.py"), "run the tests in a checkout")
	cmd := exec.Command(py, script, name, fmt.Sprint(count))
	out := lines(t, cmd)
	spawn(t, cmd)
	if l := nextLine(t, out, "py_consumer"); l != "ready" {
		t.Fatalf("py_consumer said %q", l)
	}
	s, err := Open(name, 0)
	must(t, err)
	defer s.Close()
	p, err := s.Producer()
	must(t, err)
	defer p.Close()
	must(t, p.SetPolicy(PolicyBlock, 10*time.Second))
	sent := 0
	for i := 0; i < count; i++ {
		r, err := p.Reserve(64 + (i*7919)%20000)
		must(t, err)
		fillChecked(r.Bytes(), i) // in place, in the ring
		sent += len(r.Bytes())
		must(t, r.Commit(Meta{Stream: 4, Flags: uint32(i)}))
	}
	var summary map[string]interface{}
	must(t, json.Unmarshal([]byte(nextLine(t, out, "py_consumer")), &summary))
	want := map[string]interface{}{"records": float64(count), "bytes": float64(sent), "bad": float64(0), "order_ok": true}
	for k, v := range want {
		if summary[k] != v {
			t.Fatalf("python consumer: %v, want %v", summary, want)
		}
	}
	must(t, cmd.Wait())
}

// The Go producer example into a recorder, Rust or Go: every byte of the Y4M and
// WAV files is the pattern the producer drew, and ffprobe reads them.
func TestGoProducerIntoRecorders(t *testing.T) {
	const w, h, frames, packets = 1920, 1080, 30, 100
	// Each takes its subtest's t: a missing peer skips that subtest (a skip of the
	// parent from inside a subtest would fail it).
	recorders := map[string]func(t *testing.T, sock, dir string) *exec.Cmd{
		"shmring record": func(t *testing.T, sock, dir string) *exec.Cmd {
			return exec.Command(shmringCmd(t), "record", "--listen", sock, "--out", dir)
		},
		"go recorder": func(t *testing.T, sock, dir string) *exec.Cmd {
			return exec.Command(example(t, "recorder"), "-listen", sock, "-out", dir)
		},
	}
	for name, rec := range recorders {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "ring.sock")
			cmd := rec(t, sock, dir)
			out := lines(t, cmd)
			spawn(t, cmd)
			nextLine(t, out, "recorder ready")
			prod := exec.Command(example(t, "producer"), "-connect", sock, "-seconds", "1", "-fast",
				"-video", fmt.Sprintf("%dx%d@%d", w, h, frames), "-audio", "48000x2", "-stream", "3")
			prod.Stderr = os.Stderr
			js, err := prod.Output()
			must(t, err)
			var sent map[string]struct{ Sent, Dropped uint64 }
			must(t, json.Unmarshal(js, &sent))
			if sent["video"].Sent != frames || sent["audio"].Sent != packets {
				t.Fatalf("producer: %s", js)
			}
			// Every frame and packet, and the end of each stream (the producer ends
			// its video and its audio stream).
			waitConsumed(t, sock, frames+packets+2)
			must(t, cmd.Process.Signal(syscall.SIGTERM))
			var last string
			for l := range out {
				last = l
			}
			must(t, cmd.Wait())
			if name == "go recorder" {
				var sum struct{ Frames, Packets, Ended uint64 }
				must(t, json.Unmarshal([]byte(last), &sum))
				if sum.Frames != frames || sum.Packets != packets || sum.Ended != 2 {
					t.Fatalf("recorded %s", last)
				}
			}

			y4m := filepath.Join(dir, "video-3.y4m")
			checkY4M(t, y4m, w, h, frames)
			checkWAV(t, filepath.Join(dir, "audio-3.wav"), packets, 480*2*2)
			ffprobe(t, y4m, "rawvideo", frames)
		})
	}
}

// waitConsumed watches the ring through an observer until n records were consumed.
func waitConsumed(t *testing.T, sock string, n uint64) {
	t.Helper()
	o, err := OpenReadOnly("unix:"+sock, time.Second)
	must(t, err)
	defer o.Close()
	for deadline := time.Now().Add(60 * time.Second); ; {
		st, err := o.Stats()
		must(t, err)
		if v, _ := st.Get("records_consumed"); v >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recorder consumed %v of %d records", st, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkY4M(t *testing.T, path string, w, h, frames int) {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	head, err := r.ReadString('\n')
	must(t, err)
	if !strings.HasPrefix(head, fmt.Sprintf("YUV4MPEG2 W%d H%d ", w, h)) {
		t.Fatalf("Y4M header %q", head)
	}
	row := make([]byte, w)
	for n := 0; n < frames; n++ {
		tag, err := r.ReadString('\n')
		if err != nil || tag != "FRAME\n" {
			t.Fatalf("frame %d: %q %v", n, tag, err)
		}
		for p := 0; p < 3; p++ {
			pw, ph := w, h
			if p > 0 {
				pw, ph = (w+1)/2, (h+1)/2
			}
			for y := 0; y < ph; y++ {
				_, err := io.ReadFull(r, row[:pw])
				must(t, err)
				if !bytes.Equal(row[:pw], pattern.Row(uint64(n), p, y, pw)) {
					t.Fatalf("frame %d plane %d row %d differs from what the producer drew", n, p, y)
				}
			}
		}
	}
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("more than %d frames", frames)
	}
}

func checkWAV(t *testing.T, path string, packets, packetBytes int) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	at := bytes.Index(b, []byte("data"))
	if !bytes.HasPrefix(b, []byte("RIFF")) || at < 0 {
		t.Fatal("not a WAV file")
	}
	size := int(binary.LittleEndian.Uint32(b[at+4:]))
	data := b[at+8:]
	if size != packets*packetBytes || len(data) != size {
		t.Fatalf("WAV data of %d bytes (header says %d), want %d", len(data), size, packets*packetBytes)
	}
	for n := 0; n < packets; n++ {
		for k := 0; k < packetBytes; k++ {
			if data[n*packetBytes+k] != pattern.AudioByte(uint64(n), k) {
				t.Fatalf("audio packet %d byte %d differs", n, k)
			}
		}
	}
}

// ffprobe reads the file as the media tools do: its codec and frame count.
func ffprobe(t *testing.T, path, codec string, frames int) {
	t.Helper()
	bin, err := exec.LookPath("ffprobe")
	if err != nil {
		if os.Getenv("SHMRING_GO_REQUIRE_PEERS") != "" {
			t.Fatal("ffprobe is missing (scripts/deps.sh test installs ffmpeg)")
		}
		t.Log("no ffprobe: files not probed")
		return
	}
	out, err := exec.Command(bin, "-v", "error", "-count_frames", "-select_streams", "0", "-show_entries",
		"stream=codec_name,nb_read_frames", "-of", "csv=p=0", path).Output()
	must(t, err)
	want := fmt.Sprintf("%s,%d", codec, frames)
	got := strings.TrimSpace(string(out))
	if frames < 0 { // any number of frames
		got = strings.SplitN(got, ",", 2)[0]
		want = codec
	}
	if got != want {
		t.Fatalf("ffprobe %s: %q, want %q", path, got, want)
	}
}

// The Rust producer (`shmring produce`) into the Go recorder example, over a
// socket and through a named ring: the files hold every frame and packet sent.
func TestRustProducerIntoGoRecorder(t *testing.T) {
	bin := shmringCmd(t)
	for _, how := range []string{"listen", "ring"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			where := filepath.Join(dir, "ring.sock")
			if how == "ring" {
				where = ringName(t)
			}
			cmd := exec.Command(example(t, "recorder"), "-"+how, where, "-out", dir)
			out := lines(t, cmd)
			spawn(t, cmd)
			if l := nextLine(t, out, "recorder"); l != "ready "+where {
				t.Fatalf("recorder said %q", l)
			}
			flag := map[string]string{"listen": "--connect", "ring": "--ring"}[how]
			prod := exec.Command(bin, "produce", flag, where, "--seconds", "2", "--video", "640x360@30")
			prod.Stderr = io.Discard
			js, err := prod.Output()
			must(t, err)
			var produced struct {
				Produced struct {
					Audio struct{ Sent, SamplesSent uint64 } `json:"audio"`
					Video []struct{ Sent uint64 }            `json:"video"`
				} `json:"produced"`
			}
			must(t, json.Unmarshal(js, &produced))
			frames := produced.Produced.Video[0].Sent
			packets := produced.Produced.Audio.Sent
			if frames == 0 || packets == 0 {
				t.Fatalf("produce sent nothing: %s", js)
			}
			must(t, cmd.Process.Signal(syscall.SIGINT))
			var sum struct {
				Frames, Packets, Skipped, Ended uint64
				Files                           []string
			}
			var last string
			for l := range out {
				last = l
			}
			must(t, json.Unmarshal([]byte(last), &sum))
			must(t, cmd.Wait())
			// produce ends its video and its audio stream: two end-of-stream records.
			if sum.Frames != frames || sum.Packets != packets || sum.Skipped != 0 || sum.Ended != 2 {
				t.Fatalf("recorded %+v, produced %d frames and %d packets", sum, frames, packets)
			}
			ffprobe(t, filepath.Join(dir, "video-0.y4m"), "rawvideo", int(frames))
			ffprobe(t, filepath.Join(dir, "audio-0.wav"), "pcm_s16le", -1)
			if _, err := os.Stat(filepath.Join(dir, "video-0.y4m.part")); err == nil {
				t.Fatal("a .part file is left")
			}
		})
	}
}
