package shmring

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Media translates every field of the C struct shmring_media_header (a field
// added to the header and not to Media fails this test). magic, version,
// header_size and the reserved bytes are the library's to check, not the reader's.
func TestMediaTranslatesEveryHeaderField(t *testing.T) {
	skip := map[string]bool{"magic": true, "version": true, "header_size": true}
	goFields := map[string]bool{}
	mt := reflect.TypeOf(Media{})
	for i := 0; i < mt.NumField(); i++ {
		goFields[mt.Field(i).Name] = true
	}
	for _, c := range mediaHeaderFields() {
		if skip[c] || strings.HasPrefix(c, "reserved") {
			continue
		}
		if !goFields[camel(c)] {
			t.Errorf("C field %s has no Media.%s", c, camel(c))
		}
	}
}

// camel: pts_ns -> PtsNs.
func camel(s string) string {
	parts := strings.Split(s, "_")
	for i, p := range parts {
		parts[i] = strings.ToUpper(p[:1]) + p[1:]
	}
	return strings.Join(parts, "")
}

func TestStatsAreTheLibrarysFieldList(t *testing.T) {
	s, _, p := ringWithPeers(t, 1<<20, false)
	must(t, p.Send([]byte("abcde"), Meta{}))
	st, err := s.Stats()
	must(t, err)
	if len(st.Fields) < 20 || st.Fields[0].Name != "capacity" {
		t.Fatalf("%d fields, first %q", len(st.Fields), st.Fields[0].Name)
	}
	seen := map[string]bool{}
	for _, f := range st.Fields {
		if seen[f.Name] || f.Help == "" {
			t.Errorf("field %q repeated or without help", f.Name)
		}
		seen[f.Name] = true
	}
	want := map[string]struct {
		v    uint64
		kind FieldKind
		unit string
	}{
		"capacity":          {1 << 20, Gauge, "bytes"},
		"records_committed": {1, Counter, ""},
		"bytes_committed":   {5, Counter, "bytes"},
		"consumer_attached": {1, Flag, ""},
		"producers":         {1, Gauge, ""},
	}
	for name, w := range want {
		var f *Field
		for i := range st.Fields {
			if st.Fields[i].Name == name {
				f = &st.Fields[i]
			}
		}
		if f == nil || f.Value != w.v || f.Kind != w.kind || f.Unit != w.unit {
			t.Errorf("%s: %+v, want %+v", name, f, w)
		}
	}
	if _, ok := st.Get("no_such_field"); ok {
		t.Error("Get found a field that does not exist")
	}
}

// A producer's nominal frame rate and its numbering reach the reader; EndStream
// gives the reader an end-of-stream record numbered after the stream's last frame.
func TestFrameRateSequenceAndEndOfStream(t *testing.T) {
	_, c, p := ringWithEnds(t, 1<<20, false)
	for i := 0; i < 2; i++ {
		r, err := p.ReserveVideoAt(FormatI420, 64, 32, Rate{30000, 1001}, uint64(i), SequenceAuto)
		must(t, err)
		must(t, r.Commit(Meta{Stream: 4, Kind: KindVideo}))
	}
	if _, err := p.ReserveVideoAt(FormatI420, 64, 32, Rate{30, 0}, 0, 0); !errors.Is(err, ErrMedia) {
		t.Fatalf("a rate of 30/0: %v", err)
	}
	if err := p.EndStream(4, KindRaw); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("EndStream of a raw stream: %v", err)
	}
	must(t, p.EndStream(4, KindVideo))

	var f Frame
	for want := uint64(0); want < 3; want++ {
		must(t, c.Next(context.Background(), &f))
		m, err := f.Media()
		must(t, err)
		if m.Sequence != want {
			t.Fatalf("record %d numbered %d", want, m.Sequence)
		}
		end := want == 2
		if m.EndOfStream() != end || (m.Planes == 0) != end {
			t.Fatalf("record %d: end of stream %v with %d planes", want, m.EndOfStream(), m.Planes)
		}
		if !end && (m.FpsNum != 30000 || m.FpsDen != 1001) {
			t.Fatalf("frame rate %d/%d", m.FpsNum, m.FpsDen)
		}
		if _, err := f.Plane(0); end && err == nil {
			t.Fatal("an end of stream has a plane")
		}
		must(t, f.Release())
	}
}

// The formats and their names are the library's: every constant is listed, named
// as every binding names it, and parsed back (any case, with the aliases).
func TestFormatNamesAreTheLibrarys(t *testing.T) {
	want := map[Format]string{
		FormatI420: "i420", FormatNV12: "nv12", FormatRGBA: "rgba",
		FormatPCMS16: "pcm_s16", FormatPCMF32: "pcm_f32",
	}
	got := Formats()
	if len(got) != len(want) {
		t.Fatalf("Formats() = %v, want the %d constants", got, len(want))
	}
	for _, f := range got {
		if f.String() != want[f] {
			t.Errorf("%d.String() = %q, want %q", uint32(f), f.String(), want[f])
		}
		for _, name := range []string{f.String(), strings.ToUpper(f.String())} {
			if p, err := ParseFormat(name); err != nil || p != f {
				t.Errorf("ParseFormat(%q) = %v, %v", name, p, err)
			}
		}
	}
	if p, err := ParseFormat("s16"); err != nil || p != FormatPCMS16 {
		t.Errorf("ParseFormat(s16) = %v, %v", p, err)
	}
	if s := Format(99).String(); s != "format(99)" {
		t.Errorf("Format(99).String() = %q", s)
	}
	_, err := ParseFormat("yuv9")
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "i420, nv12, rgba") {
		t.Errorf("ParseFormat(yuv9): %v", err)
	}
}
