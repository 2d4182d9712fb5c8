// Package modelserver is a scripted stand-in for the model APIs real
// coding agents talk to: enough of Anthropic's Messages API (Claude Code),
// OpenAI's Responses API (Codex) and Gemini's generateContent (Gemini CLI)
// to drive an unmodified agent through a fixed session of tool calls.
//
// The server plays the model: each answer to the agent's main conversation
// is the next step of the script (a shell command, a file to write, a file
// to edit), expressed with the tools the agent declared in its request, and
// the agent runs it and sends the result back in its next request. The
// server logs every request body: the tool results in them are what the
// agent saw, and the ground truth of what leaked to the model.
//
// It listens on 127.0.0.1 only. Requests the agent makes on the side (a
// title, a quota check, a JSON classification) get short answers that do
// not advance the script.
package modelserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Step is one turn of the scripted model: exactly one of its fields is set.
type Step struct {
	// Name says what the step is for, in messages.
	Name string
	// Shell is a command for the agent's shell tool, run in its working
	// directory.
	Shell string
	// Write is a file to create with the agent's file-writing tool.
	Write *File
	// Edit replaces one whole line of a file with the agent's editing tool.
	Edit *Edit
}

// File is a file to write. Path is absolute (some agents' tools refuse
// relative paths); Rel is the same path relative to the working directory
// (patches name files that way).
type File struct {
	Path, Rel, Content string
}

// Edit replaces Old with New in a file: both are whole lines, without
// their newline, so that the edit can be a patch hunk too.
type Edit struct {
	Path, Rel, Old, New string
}

// FinalText is the model's last answer, once every step has a result.
const FinalText = "All steps are done."

// Request is one request the agent made, as received.
type Request struct {
	Time   time.Time
	Method string
	Path   string // with the query
	Body   []byte
	// Main says the request was part of the scripted conversation (it
	// declared the agent's tools); Step is the step it was answered with
	// (len(Script) for the final text, -1 for side requests).
	Main bool
	Step int
}

// Server is a running scripted model.
type Server struct {
	script []Step
	ln     net.Listener
	srv    *http.Server

	mu       sync.Mutex
	requests []Request
	results  map[int]string // step -> the tool result the agent sent back
	final    bool           // the final text was sent
	errs     []string
}

// Start listens on a free port of 127.0.0.1 and serves script.
func Start(script []Step) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("model server: %w", err)
	}
	s := &Server{script: script, ln: ln, results: map[int]string{}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: time.Minute}
	go s.srv.Serve(ln)
	return s, nil
}

// URL is the server's base URL, http://127.0.0.1:PORT.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Requests returns a copy of every request received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Result returns the tool result the agent sent back for step i.
func (s *Server) Result(i int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.results[i]
	return r, ok
}

// Finished says the whole script ran: every step has a result and the
// final answer was sent.
func (s *Server) Finished() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final && len(s.results) == len(s.script)
}

// Errors are the requests the server could not make sense of.
func (s *Server) Errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}

func (s *Server) errorf(format string, args ...any) {
	s.mu.Lock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	req := Request{Time: time.Now(), Method: r.Method, Path: r.URL.RequestURI(), Body: body, Step: -1}
	idx := s.log(req)
	path := r.URL.Path
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/messages/count_tokens"):
		writeJSON(w, map[string]any{"input_tokens": approxTokens(body)})
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/messages"):
		s.anthropic(w, body, idx)
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/responses"):
		s.openai(w, body, idx)
	case r.Method == http.MethodPost && strings.Contains(path, ":countTokens"):
		writeJSON(w, map[string]any{"totalTokens": approxTokens(body)})
	case r.Method == http.MethodPost && strings.Contains(path, ":streamGenerateContent"):
		s.gemini(w, body, idx, true)
	case r.Method == http.MethodPost && strings.Contains(path, ":generateContent"):
		s.gemini(w, body, idx, false)
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/models"):
		// Model lists: an empty one; the agents fall back to their
		// built-in names.
		writeJSON(w, map[string]any{"data": []any{}, "models": []any{}, "object": "list"})
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) log(r Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
	return len(s.requests) - 1
}

// answer records which step request idx was answered with and the tool
// results it carried (call id -> text), and returns the step to answer
// with: one past the highest step that has a result.
func (s *Server) answer(idx int, results map[string]string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := 0
	for id, text := range results {
		i, ok := stepOf(id)
		if !ok || i >= len(s.script) {
			continue
		}
		s.results[i] = text
		if i+1 > next {
			next = i + 1
		}
	}
	s.requests[idx].Main = true
	s.requests[idx].Step = next
	if next >= len(s.script) {
		s.final = true
	}
	return next
}

func (s *Server) side(idx int) {
	s.mu.Lock()
	s.requests[idx].Step = -1
	s.mu.Unlock()
}

// callID names step i's tool call; stepOf reads it back. Each API has its
// own form of id (toolu_..., call_...), which the agents may check.
func callID(prefix string, i int) string { return fmt.Sprintf("%s_agentlock_%02d", prefix, i) }

func stepOf(id string) (int, bool) {
	_, n, ok := strings.Cut(id, "_agentlock_")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil && i >= 0
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// sse writes server-sent events and flushes each.
type sse struct {
	w http.ResponseWriter
}

func newSSE(w http.ResponseWriter) sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return sse{w}
}

// event writes one event; an empty name writes a data-only event.
func (e sse) event(name string, data any) {
	b, _ := json.Marshal(data)
	var buf bytes.Buffer
	if name != "" {
		fmt.Fprintf(&buf, "event: %s\n", name)
	}
	fmt.Fprintf(&buf, "data: %s\n\n", b)
	e.w.Write(buf.Bytes())
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

func approxTokens(body []byte) int { return len(body)/4 + 1 }

// text flattens a tool result, which each API may give as a string or as
// structured content, into the text the model would read.
func text(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case []any:
		var parts []string
		for _, e := range t {
			parts = append(parts, text(e))
		}
		return strings.Join(parts, "\n")
	case map[string]any:
		for _, k := range []string{"text", "output", "content", "error", "llmContent"} {
			if x, ok := t[k]; ok {
				return text(x)
			}
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, k+": "+text(t[k]))
		}
		return strings.Join(parts, "\n")
	default:
		b, _ := json.Marshal(t)
		return string(b)
	}
}

// heredoc is a shell command that writes content to path, for an agent
// that has no file-writing tool the server knows.
func heredoc(path, content string) string {
	return fmt.Sprintf("cat > %s <<'AGENTLOCK_EOF'\n%sAGENTLOCK_EOF", shellQuote(path), content)
}

func sedEdit(e *Edit) string {
	esc := func(s string) string {
		r := strings.NewReplacer(`\`, `\\`, `/`, `\/`, `&`, `\&`, `.`, `\.`, `[`, `\[`, `*`, `\*`, `^`, `\^`, `$`, `\$`)
		return r.Replace(s)
	}
	return fmt.Sprintf("sed -i 's/^%s$/%s/' %s", esc(e.Old), strings.NewReplacer(`\`, `\\`, `/`, `\/`, `&`, `\&`).Replace(e.New), shellQuote(e.Path))
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
