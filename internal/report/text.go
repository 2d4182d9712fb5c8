package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

type textWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewText returns a Writer of human-readable lines, one per record:
//
//	2025-06-01 19:04:02.000 +0200 START enforce /home/alice/proj: claude  (pid 1200, user alice uid 1000, kernel 6.1.0, bpf-lsm)
//	19:04:05.123 BLOCKED read /home/alice/.ssh/id_rsa  (cat pid 1234) 🔥sensitive
//	19:04:09.500 SUMMARY exit 0 after 7.5s: 1 escape, 120 in bounds, 800 system, 0 lost
//
// Times are local. Names that are not plain printable text (spaces, quotes,
// control characters, invalid UTF-8, invisible formatting characters) are
// written as Go-quoted strings, so a hostile file name can neither break a
// record across lines nor reach the terminal as an escape sequence.
func NewText(w io.Writer) Writer {
	return &textWriter{w: w}
}

func (t *textWriter) Start(s Start) error {
	return t.write(TypeStart, func(b []byte) []byte {
		b = local(s.Time).AppendFormat(b, "2006-01-02 15:04:05.000 -0700")
		b = append(b, " START "...)
		b = appendQuoted(b, string(s.Mode))
		b = append(b, ' ')
		b = appendQuoted(b, s.Dir)
		b = append(b, ':')
		for _, a := range s.Agent {
			b = append(b, ' ')
			b = appendQuoted(b, a)
		}
		b = fmt.Appendf(b, "  (pid %d, user ", s.PID)
		b = appendQuoted(b, s.User)
		b = fmt.Appendf(b, " uid %d", s.UID)
		if s.Version != "" {
			b = append(b, ", agent-lock "...)
			b = appendQuoted(b, s.Version)
		}
		if s.Kernel != "" {
			b = append(b, ", kernel "...)
			b = appendQuoted(b, s.Kernel)
		}
		if s.Engine != "" {
			b = append(b, ", "...)
			b = appendQuoted(b, s.Engine)
		}
		if s.TmpDir != "" {
			b = append(b, ", tmpdir "...)
			b = appendQuoted(b, s.TmpDir)
		}
		if len(s.Profiles) > 0 {
			b = append(b, ", profile"...)
			for _, n := range s.Profiles {
				b = append(b, ' ')
				b = appendQuoted(b, n)
			}
		}
		if len(s.WithheldEnv) > 0 {
			b = append(b, ", withheld env"...)
			for _, n := range s.WithheldEnv {
				b = append(b, ' ')
				b = appendQuoted(b, n)
			}
		}
		b = append(b, ')')
		if len(s.Limits) > 0 {
			b = append(b, "\n  this engine leaves open:"...)
			for i, l := range s.Limits {
				if i > 0 {
					b = append(b, ';')
				}
				b = append(b, ' ')
				b = appendQuoted(b, l)
			}
		}
		return b
	})
}

func (t *textWriter) Escape(e Event) error {
	return t.write(TypeEscape, func(b []byte) []byte {
		b = local(e.Time).AppendFormat(b, "15:04:05.000")
		b = append(b, ' ')
		b = appendQuoted(b, strings.ToUpper(string(e.Verdict)))
		b = append(b, ' ')
		b = appendQuoted(b, e.Op)
		if e.Path != "" {
			b = append(b, ' ')
			b = appendQuoted(b, e.Path)
		}
		if e.Path2 != "" {
			b = append(b, " -> "...)
			b = appendQuoted(b, e.Path2)
		}
		if e.TargetPID != 0 {
			b = fmt.Appendf(b, " -> pid %d", e.TargetPID)
		}
		b = append(b, "  ("...)
		if e.PID == 0 && e.Comm == "" {
			// Landlock's audit records name no process.
			b = append(b, "process not recorded"...)
		} else {
			b = appendQuoted(b, e.Comm)
			b = fmt.Appendf(b, " pid %d", e.PID)
		}
		if e.TID != 0 && e.TID != e.PID {
			b = fmt.Appendf(b, " tid %d", e.TID)
		}
		b = append(b, ')')
		if e.Rule != "" {
			// A rule name has spaces of its own ("home secret ~/.ssh"):
			// quoted only for what a path in it may hold.
			b = append(b, " ["...)
			if plain(strings.ReplaceAll(e.Rule, " ", "_")) {
				b = append(b, e.Rule...)
			} else {
				b = strconv.AppendQuote(b, e.Rule)
			}
			b = append(b, ']')
		}
		if e.Sensitive {
			b = append(b, " 🔥sensitive"...)
		}
		if e.Repeats > 0 {
			b = fmt.Appendf(b, " (and %d times since its last report)", e.Repeats)
		}
		return b
	})
}

// Progress is for live views; a text report stays one line per escape.
func (t *textWriter) Progress(Progress) error { return nil }

// Open writes nothing: a text report lists escapes; in-bounds samples are
// for live views.
func (t *textWriter) Open(Event) error { return nil }

func (t *textWriter) Summary(s Summary) error {
	return t.write(TypeSummary, func(b []byte) []byte {
		b = local(s.Time).AppendFormat(b, "15:04:05.000")
		b = fmt.Appendf(b, " SUMMARY exit %d after %v: %d %s, %d in bounds, %d system, %d lost",
			s.ExitCode, s.Duration.Round(time.Millisecond), s.Escapes, plural(s.Escapes, "escape", "escapes"),
			s.InBounds, s.System, s.Lost)
		if s.Lost > 0 {
			b = append(b, " (incomplete: the kernel's ring buffer overflowed)"...)
		}
		if s.Repeats > 0 {
			b = fmt.Appendf(b, "; %d of the escapes were repeats, counted, not listed one by one", s.Repeats)
		}
		b = appendUndos(b, "\n  undone (put back as they were): ", s.Undone)
		b = appendUndos(b, "\n  LEFT CHANGED (could not be put back): ", s.LeftChanged)
		return b
	})
}

// appendUndos lists the tripwire's entries: path (op, what was done).
func appendUndos(b []byte, head string, us []Undo) []byte {
	if len(us) == 0 {
		return b
	}
	b = append(b, head...)
	for i, u := range us {
		if i > 0 {
			b = append(b, "; "...)
		}
		b = appendQuoted(b, u.Path)
		b = append(b, " ("...)
		b = appendQuoted(b, u.Op)
		if u.Count > 1 {
			b = fmt.Appendf(b, " %d times", u.Count)
		}
		what := u.Action
		if u.Why != "" {
			what = u.Why
		}
		if what != "" {
			b = append(b, ", "...)
			b = append(b, strconv.Quote(what)[1:len(strconv.Quote(what))-1]...)
		}
		b = append(b, ')')
	}
	return b
}

func (t *textWriter) write(typ RecordType, format func([]byte) []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(format(t.buf[:0]), '\n')
	if _, err := t.w.Write(t.buf); err != nil {
		return fmt.Errorf("write %s record: %w", typ, err)
	}
	return flush(t.w, typ)
}

func local(t time.Time) time.Time {
	if t.IsZero() {
		t = now()
	}
	return t.Local()
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// appendQuoted appends s as is when it is plain printable text, and
// Go-quoted otherwise. Quoting spaces too keeps a record unambiguous: a file
// named "x  (cat pid 1)" cannot pass for the end of a line.
func appendQuoted(b []byte, s string) []byte {
	if s == "" {
		return append(b, `""`...)
	}
	if plain(s) {
		return append(b, s...)
	}
	return strconv.AppendQuote(b, s)
}

func plain(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c <= ' ' || c == '"' || c == '\\' || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || !strconv.IsPrint(r) {
			return false
		}
		i += size
	}
	return true
}
