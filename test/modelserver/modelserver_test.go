package modelserver

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

var testScript = []Step{
	{Name: "run", Shell: "echo hi"},
	{Name: "write", Write: &File{Path: "/p/a.txt", Rel: "a.txt", Content: "one\ntwo\n"}},
	{Name: "edit", Edit: &Edit{Path: "/p/a.txt", Rel: "a.txt", Old: "one", New: "uno"}},
}

func start(t *testing.T) *Server {
	t.Helper()
	s, err := Start(testScript)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Fatalf("listens on %s, want loopback", s.URL())
	}
	return s
}

func post(t *testing.T, url string, body any) []byte {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s %s", url, resp.Status, out)
	}
	return out
}

// events splits a server-sent event stream into its data objects.
func events(t *testing.T, stream []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(stream))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("event %q: %v", d, err)
			}
			out = append(out, m)
		}
	}
	return out
}

// TestAnthropic: the scripted conversation as Claude Code sees it: each
// answer streams one tool_use whose input arrives in input_json_delta
// pieces; a tool_result moves the script on; a request without the Bash
// tool is answered on the side and moves nothing.
func TestAnthropic(t *testing.T) {
	s := start(t)
	tools := []any{map[string]any{"name": "Bash"}, map[string]any{"name": "Write"}, map[string]any{"name": "Edit"}}
	call := func(messages []any) (name string, input map[string]any, text string) {
		evs := events(t, post(t, s.URL()+"/v1/messages?beta=true", map[string]any{"model": "m", "stream": true, "tools": tools, "messages": messages}))
		var js string
		for _, e := range evs {
			switch e["type"] {
			case "content_block_start":
				cb := e["content_block"].(map[string]any)
				if cb["type"] == "tool_use" {
					name = cb["name"].(string)
				}
			case "content_block_delta":
				d := e["delta"].(map[string]any)
				switch d["type"] {
				case "input_json_delta":
					js += d["partial_json"].(string)
				case "text_delta":
					text += d["text"].(string)
				}
			}
		}
		if evs[0]["type"] != "message_start" || evs[len(evs)-1]["type"] != "message_stop" {
			t.Errorf("stream from %v to %v", evs[0]["type"], evs[len(evs)-1]["type"])
		}
		if js != "" {
			if err := json.Unmarshal([]byte(js), &input); err != nil {
				t.Fatalf("input %q: %v", js, err)
			}
		}
		return
	}
	user := map[string]any{"role": "user", "content": "go"}
	if name, in, _ := call([]any{user}); name != "Bash" || in["command"] != "echo hi" {
		t.Errorf("step 0: %s %v", name, in)
	}
	result := func(i int, text string) any {
		return map[string]any{"role": "user", "content": []any{map[string]any{
			"type": "tool_result", "tool_use_id": callID("toolu", i), "content": []any{map[string]any{"type": "text", "text": text}}}}}
	}
	if name, in, _ := call([]any{user, result(0, "hi")}); name != "Write" || in["file_path"] != "/p/a.txt" || in["content"] != "one\ntwo\n" {
		t.Errorf("step 1: %s %v", name, in)
	}
	// A side request, then the rest.
	side := events(t, post(t, s.URL()+"/v1/messages", map[string]any{"model": "haiku", "stream": true, "messages": []any{user}}))
	if len(side) == 0 {
		t.Error("no answer on the side")
	}
	if name, in, _ := call([]any{user, result(0, "hi"), result(1, "written")}); name != "Edit" || in["old_string"] != "one" || in["new_string"] != "uno" {
		t.Errorf("step 2: %s %v", name, in)
	}
	if name, _, text := call([]any{user, result(0, "hi"), result(1, "written"), result(2, "edited")}); name != "" || text != FinalText {
		t.Errorf("the end: %q %q", name, text)
	}
	if r, _ := s.Result(0); r != "hi" || !s.Finished() {
		t.Errorf("result 0 %q, finished %v", r, s.Finished())
	}
	if b := post(t, s.URL()+"/v1/messages/count_tokens", map[string]any{"messages": []any{user}}); !strings.Contains(string(b), "input_tokens") {
		t.Errorf("count_tokens: %s", b)
	}
	main := 0
	for _, r := range s.Requests() {
		if r.Main {
			main++
		}
	}
	if main != 4 {
		t.Errorf("%d requests of the conversation, want 4", main)
	}
}

// TestOpenAI: Codex's two shapes: a shell function among its tools (the
// call's arguments are JSON), and code mode, whose one tool runs
// JavaScript that calls the nested tools; results come back by call_id.
func TestOpenAI(t *testing.T) {
	s := start(t)
	call := func(body map[string]any) map[string]any {
		body["stream"] = true
		evs := events(t, post(t, s.URL()+"/v1/responses", body))
		var item map[string]any
		for _, e := range evs {
			if e["type"] == "response.output_item.done" {
				item = e["item"].(map[string]any)
			}
		}
		if evs[len(evs)-1]["type"] != "response.completed" {
			t.Errorf("the stream ends with %v", evs[len(evs)-1]["type"])
		}
		return item
	}
	flat := []any{map[string]any{"type": "function", "name": "shell_command", "parameters": map[string]any{
		"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}},
		map[string]any{"type": "custom", "name": "apply_patch"}}
	item := call(map[string]any{"model": "m", "tools": flat, "input": []any{}})
	var args map[string]any
	json.Unmarshal([]byte(item["arguments"].(string)), &args)
	if item["type"] != "function_call" || item["name"] != "shell_command" || args["command"] != "echo hi" {
		t.Errorf("step 0: %v", item)
	}
	out := func(i int) any {
		return map[string]any{"type": "function_call_output", "call_id": callID("call", i), "output": "done"}
	}
	item = call(map[string]any{"model": "m", "tools": flat, "input": []any{out(0)}})
	if item["type"] != "custom_tool_call" || item["name"] != "apply_patch" || !strings.Contains(item["input"].(string), "*** Add File: a.txt\n+one\n+two\n") {
		t.Errorf("step 1: %v", item)
	}
	// Code mode: tools declared in the input, in a namespace.
	code := []any{map[string]any{"type": "additional_tools", "tools": []any{map[string]any{
		"type": "namespace", "name": "functions", "tools": []any{map[string]any{"type": "custom", "name": "exec"}}}}},
		out(0), out(1)}
	item = call(map[string]any{"model": "m", "input": code})
	if item["type"] != "custom_tool_call" || item["name"] != "exec" || item["namespace"] != "functions" ||
		!strings.Contains(item["input"].(string), "tools.apply_patch(") || !strings.Contains(item["input"].(string), `-one\n+uno`) {
		t.Errorf("step 2 in code mode: %v", item)
	}
	item = call(map[string]any{"model": "m", "input": append(code, out(2))})
	if item["type"] != "message" || !s.Finished() {
		t.Errorf("the end: %v, finished %v", item, s.Finished())
	}
	if r, _ := s.Result(1); r != "done" {
		t.Errorf("result 1: %q", r)
	}
}

// TestGemini: Gemini CLI's streamed calls with its parameter names, its
// function responses by id, and a JSON answer on the side made from the
// schema it gives.
func TestGemini(t *testing.T) {
	s := start(t)
	decl := []any{map[string]any{"functionDeclarations": []any{
		map[string]any{"name": "run_shell_command", "parametersJsonSchema": map[string]any{"properties": map[string]any{"command": map[string]any{}, "description": map[string]any{}}}},
		map[string]any{"name": "write_file", "parametersJsonSchema": map[string]any{"properties": map[string]any{"file_path": map[string]any{}, "content": map[string]any{}}}},
	}}}
	call := func(contents []any) map[string]any {
		evs := events(t, post(t, s.URL()+"/v1beta/models/g:streamGenerateContent?alt=sse", map[string]any{"contents": contents, "tools": decl}))
		return evs[0]["candidates"].([]any)[0].(map[string]any)["content"].(map[string]any)["parts"].([]any)[0].(map[string]any)
	}
	user := map[string]any{"role": "user", "parts": []any{map[string]any{"text": "go"}}}
	fc := call([]any{user})["functionCall"].(map[string]any)
	if fc["name"] != "run_shell_command" || fc["args"].(map[string]any)["command"] != "echo hi" || fc["id"] != callID("gemini", 0) {
		t.Errorf("step 0: %v", fc)
	}
	resp := map[string]any{"role": "user", "parts": []any{map[string]any{"functionResponse": map[string]any{
		"id": callID("gemini", 0), "name": "run_shell_command", "response": map[string]any{"output": "hi"}}}}}
	fc = call([]any{user, resp})["functionCall"].(map[string]any)
	if fc["name"] != "write_file" || fc["args"].(map[string]any)["file_path"] != "/p/a.txt" {
		t.Errorf("step 1: %v", fc)
	}
	if r, _ := s.Result(0); r != "hi" {
		t.Errorf("result 0: %q", r)
	}
	b := post(t, s.URL()+"/v1beta/models/flash:generateContent", map[string]any{"contents": []any{user},
		"generationConfig": map[string]any{"responseMimeType": "application/json", "responseJsonSchema": map[string]any{
			"type": "object", "properties": map[string]any{"next_speaker": map[string]any{"type": "string", "enum": []any{"user", "model"}},
				"score": map[string]any{"type": "integer", "minimum": 1}}}}})
	var side struct {
		Candidates []struct {
			Content struct {
				Parts []struct{ Text string }
			}
		}
	}
	json.Unmarshal(b, &side)
	var answer map[string]any
	if err := json.Unmarshal([]byte(side.Candidates[0].Content.Parts[0].Text), &answer); err != nil || answer["next_speaker"] != "user" || answer["score"] != 1.0 {
		t.Errorf("side answer %s: %v", b, err)
	}
}

// TestRegistry: npm's view of the stand-in: a package document whose
// tarball is where it says and matches its integrity.
func TestRegistry(t *testing.T) {
	r, err := StartRegistry("demo", "1.0.0", "exports.x = 1;\n")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	resp, err := http.Get(r.URL() + "demo")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Versions map[string]struct {
			Dist struct{ Tarball, Integrity string }
		}
	}
	json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	dist := doc.Versions["1.0.0"].Dist
	resp, err = http.Get(dist.Tarball)
	if err != nil {
		t.Fatal(err)
	}
	tgz, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum := sha512.Sum512(tgz)
	if dist.Integrity != "sha512-"+base64.StdEncoding.EncodeToString(sum[:]) {
		t.Errorf("integrity %s does not match the tarball", dist.Integrity)
	}
	gz, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, " ") != "package/package.json package/index.js" {
		t.Errorf("tarball holds %v", names)
	}
}
