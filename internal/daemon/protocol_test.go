package daemon

import (
	"encoding/binary"
	"net"
	"os"
	"strings"
	"testing"
)

func TestDecodeRequest(t *testing.T) {
	ok := []string{
		`{"v":1,"op":"ping"}`,
		`{"v":1,"op":"run","args":["--headless",".","--","sh"],"env":["PATH=/bin","A="]}`,
		`{"v":1,"op":"pane"}`,
	}
	for _, s := range ok {
		if _, err := DecodeRequest([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	bad := map[string]string{
		`{"v":2,"op":"run"}`:                       "restart the daemon",
		`{"op":"run"}`:                             "protocol version 0",
		`[]`:                                       "JSON object",
		`{"v":1,"op":"shell"}`:                     "unknown op",
		`{"v":1,"op":"run","uid":0}`:               "unknown field",
		`{"v":1,"op":"run","env":["NOEQUALS"]}`:    "not NAME=value",
		`{"v":1,"op":"run","env":["=x"]}`:          "not NAME=value",
		`{"v":1,"op":"run","args":["a\u0000b"]}`:   "NUL",
		`{"v":1,"op":"ping","args":["x"]}`:         "no arguments",
		`{"v":1,"op":"run"} {"v":1,"op":"run"}`:    "JSON object",
		`{"v":1,"op":"run","args":"--allow-root"}`: "cannot unmarshal",
	}
	for s, want := range bad {
		_, err := DecodeRequest([]byte(s))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error saying %q", s, err, want)
		}
	}
	long := `{"v":1,"op":"run","args":["` + strings.Repeat("a", maxString+1) + `"]}`
	if _, err := DecodeRequest([]byte(long)); err == nil {
		t.Error("an argument over the bound was taken")
	}
}

// FuzzDecodeRequest: whatever the bytes, DecodeRequest returns an error or
// a request within the bounds, and never panics.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"v":1,"op":"run","args":["--headless","--","sh"],"env":["PATH=/bin"]}`))
	f.Add([]byte(`{"v":1,"op":"ping"}`))
	f.Add([]byte(`{"v":1,"op":"pane","args":[""],"env":["A=\u0000"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			return
		}
		if r.V != Version || r.check() != nil || len(r.Args) > maxArgs || len(r.Env) > maxEnv {
			t.Fatalf("accepted %q as %+v", b, r)
		}
	})
}

func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	a, b, err := socketpair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestFrames: a request and its descriptors arrive whole; a frame over
// the bound, one of no bytes and one with more descriptors than a request
// carries are refused, and what came with them is closed.
func TestFrames(t *testing.T) {
	a, b := pair(t)
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	req := Request{V: Version, Op: OpRun, Args: []string{"--", "true"}, Env: []string{"A=b"}}
	if err := writeFrame(a, req, int(dir.Fd()), 0, 1, 2); err != nil {
		t.Fatal(err)
	}
	body, files, err := readFrame(b, fdsPerRequest)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRequest(body)
	if err != nil || len(files) != 4 || got.Args[1] != "true" {
		t.Fatalf("got %+v, %d descriptors, %v", got, len(files), err)
	}
	for _, f := range files {
		f.Close()
	}

	for name, head := range map[string]uint32{"over the bound": MaxFrame + 1, "empty": 0} {
		a, b := pair(t)
		a.Write(binary.BigEndian.AppendUint32(nil, head))
		if _, _, err := readFrame(b, fdsPerRequest); err == nil || !strings.Contains(err.Error(), "at most") {
			t.Errorf("a frame %s: %v", name, err)
		}
	}

	a, b = pair(t)
	if err := writeFrame(a, req, 0, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, files, err := readFrame(b, fdsPerRequest); err == nil || files != nil {
		t.Errorf("five descriptors were taken: %v", err)
	}
}
