package modelserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// OpenAI's Responses API (POST /v1/responses), as Codex uses it: the
// conversation is a list of input items, the agent's tools are function
// tools (a shell) and custom tools (apply_patch, which takes a patch as
// free text); tool results come back as *_call_output items naming the
// call_id; answers stream as server-sent events (response.created, each
// output item added and done, response.completed with the usage).

type openaiRequest struct {
	Model  string          `json:"model"`
	Stream bool            `json:"stream"`
	Input  json.RawMessage `json:"input"`
	Tools  []any           `json:"tools"`
}

func (s *Server) openai(w http.ResponseWriter, body []byte, idx int) {
	var req openaiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.errorf("openai: %v", err)
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	var items []map[string]any
	json.Unmarshal(req.Input, &items) // a plain string input has no results
	tools := openaiTools(req.Tools, "")
	for _, it := range items {
		// Codex may declare its tools in the input instead, where they
		// apply from.
		if it["type"] == "additional_tools" {
			ts, _ := it["tools"].([]any)
			tools = append(tools, openaiTools(ts, "")...)
		}
	}
	shell := openaiShellTool(tools)
	exec := openaiFind(tools, "custom", "exec")
	if shell == nil && exec == nil {
		s.side(idx)
		s.openaiReply(w, req, []map[string]any{openaiMessage("ok")})
		return
	}
	results := map[string]string{}
	for _, it := range items {
		switch it["type"] {
		case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
			if id, ok := it["call_id"].(string); ok {
				results[id] = text(it["output"])
			}
		}
	}
	next := s.answer(idx, results)
	if next >= len(s.script) {
		s.openaiReply(w, req, []map[string]any{openaiMessage(FinalText)})
		return
	}
	id := callID("call", next)
	var call map[string]any
	if shell != nil {
		call = openaiCall(s.script[next], id, tools, shell)
	} else {
		call = openaiCodeMode(s.script[next], id, exec)
	}
	s.openaiReply(w, req, []map[string]any{call})
}

// openaiTool is a tool the agent declared: its kind (function, custom,
// local_shell), name, the namespace it is declared in ("" at the top) and
// its parameters' names and types.
type openaiTool struct {
	kind, name, namespace string
	params                map[string]string
}

// openaiTools flattens a tools list, namespaces included.
func openaiTools(list []any, namespace string) []openaiTool {
	var out []openaiTool
	for _, e := range list {
		t, ok := e.(map[string]any)
		if !ok {
			continue
		}
		kind, _ := t["type"].(string)
		name, _ := t["name"].(string)
		if kind == "namespace" {
			sub, _ := t["tools"].([]any)
			out = append(out, openaiTools(sub, name)...)
			continue
		}
		if kind == "local_shell" {
			name = "local_shell"
		}
		params := map[string]string{}
		if p, ok := t["parameters"].(map[string]any); ok {
			if props, ok := p["properties"].(map[string]any); ok {
				for k, v := range props {
					m, _ := v.(map[string]any)
					typ, _ := m["type"].(string)
					params[k] = typ
				}
			}
		}
		out = append(out, openaiTool{kind: kind, name: name, namespace: namespace, params: params})
	}
	return out
}

func openaiFind(tools []openaiTool, kind, name string) *openaiTool {
	for i, t := range tools {
		if t.kind == kind && t.name == name {
			return &tools[i]
		}
	}
	return nil
}

// openaiShellTool finds the agent's shell among its tools, or nil.
func openaiShellTool(tools []openaiTool) *openaiTool {
	for _, want := range []string{"shell_command", "exec_command", "shell"} {
		if t := openaiFind(tools, "function", want); t != nil {
			return t
		}
	}
	return openaiFind(tools, "local_shell", "local_shell")
}

// patch is a Write or Edit step as an apply_patch patch, or "".
func patch(st Step) string {
	switch {
	case st.Write != nil:
		var b strings.Builder
		b.WriteString("*** Begin Patch\n*** Add File: " + st.Write.Rel + "\n")
		for _, l := range strings.SplitAfter(strings.TrimSuffix(st.Write.Content, "\n"), "\n") {
			b.WriteString("+" + strings.TrimSuffix(l, "\n") + "\n")
		}
		b.WriteString("*** End Patch\n")
		return b.String()
	case st.Edit != nil:
		return "*** Begin Patch\n*** Update File: " + st.Edit.Rel + "\n@@\n-" + st.Edit.Old + "\n+" + st.Edit.New + "\n*** End Patch\n"
	}
	return ""
}

// command is step st as a shell command.
func command(st Step) string {
	switch {
	case st.Write != nil:
		return heredoc(st.Write.Path, st.Write.Content)
	case st.Edit != nil:
		return sedEdit(st.Edit)
	}
	return st.Shell
}

// openaiCall is step st as an output item calling one of Codex's tools.
func openaiCall(st Step, id string, tools []openaiTool, shell *openaiTool) map[string]any {
	if p := patch(st); p != "" {
		if t := openaiFind(tools, "custom", "apply_patch"); t != nil {
			return withNamespace(map[string]any{"type": "custom_tool_call", "id": "ctc_" + id, "call_id": id, "name": "apply_patch", "input": p, "status": "completed"}, t)
		}
		if t := openaiFind(tools, "function", "apply_patch"); t != nil {
			return withNamespace(openaiFunctionCall(id, "apply_patch", map[string]any{"input": p}), t)
		}
	}
	cmd := command(st)
	argv := []string{"bash", "-lc", cmd}
	var call map[string]any
	switch {
	case shell.kind == "local_shell":
		return map[string]any{"type": "local_shell_call", "id": "lsc_" + id, "call_id": id, "status": "completed",
			"action": map[string]any{"type": "exec", "command": argv}}
	case shell.name == "exec_command":
		call = openaiFunctionCall(id, shell.name, map[string]any{"cmd": cmd, "yield_time_ms": 30000})
	case shell.params["command"] == "array":
		call = openaiFunctionCall(id, shell.name, map[string]any{"command": argv})
	default:
		call = openaiFunctionCall(id, shell.name, map[string]any{"command": cmd})
	}
	return withNamespace(call, shell)
}

func withNamespace(call map[string]any, t *openaiTool) map[string]any {
	if t.namespace != "" {
		call["namespace"] = t.namespace
	}
	return call
}

// openaiCodeMode is step st as a call of Codex's code mode: its one tool,
// exec, runs JavaScript that calls the nested tools (exec_command,
// apply_patch). A command still running when exec_command returns is
// waited for through write_stdin, and everything it printed is the result.
func openaiCodeMode(st Step, id string, exec *openaiTool) map[string]any {
	var js string
	if p := patch(st); p != "" {
		pj, _ := json.Marshal(p)
		js = fmt.Sprintf("const r = await tools.apply_patch(%s);\ntext(typeof r === \"string\" ? r : JSON.stringify(r));\n", pj)
	} else {
		cj, _ := json.Marshal(command(st))
		js = fmt.Sprintf(`let r = await tools.exec_command({cmd: %s, yield_time_ms: 30000});
let out = r.output || "";
while (r.session_id !== undefined && r.exit_code === undefined) {
  r = await tools.write_stdin({session_id: r.session_id, chars: "", yield_time_ms: 30000});
  out += r.output || "";
}
text(out);
`, cj)
	}
	js = "// @exec: {\"yield_time_ms\": 300000}\n" + js
	return withNamespace(map[string]any{"type": "custom_tool_call", "id": "ctc_" + id, "call_id": id, "name": exec.name, "input": js, "status": "completed"}, exec)
}

func openaiFunctionCall(id, name string, args map[string]any) map[string]any {
	js, _ := json.Marshal(args)
	return map[string]any{"type": "function_call", "id": "fc_" + id, "call_id": id, "name": name, "arguments": string(js), "status": "completed"}
}

func openaiMessage(t string) map[string]any {
	return map[string]any{"type": "message", "id": fmt.Sprintf("msg_agentlock_%d", time.Now().UnixNano()), "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": t, "annotations": []any{}}}}
}

func (s *Server) openaiReply(w http.ResponseWriter, req openaiRequest, output []map[string]any) {
	id := fmt.Sprintf("resp_agentlock_%d", len(s.Requests()))
	resp := func(status string, out []map[string]any) map[string]any {
		r := map[string]any{"id": id, "object": "response", "created_at": time.Now().Unix(), "status": status,
			"model": req.Model, "output": out}
		if status == "completed" {
			r["usage"] = map[string]any{"input_tokens": 100, "input_tokens_details": map[string]any{"cached_tokens": 0},
				"output_tokens": 20, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 120}
		}
		return r
	}
	if !req.Stream {
		writeJSON(w, resp("completed", output))
		return
	}
	e := newSSE(w)
	seq := 0
	ev := func(name string, data map[string]any) {
		data["type"] = name
		data["sequence_number"] = seq
		seq++
		e.event(name, data)
	}
	ev("response.created", map[string]any{"response": resp("in_progress", []map[string]any{})})
	for i, it := range output {
		ev("response.output_item.added", map[string]any{"output_index": i, "item": it})
		if it["type"] == "message" {
			t := it["content"].([]any)[0].(map[string]any)["text"]
			ev("response.output_text.delta", map[string]any{"output_index": i, "item_id": it["id"], "content_index": 0, "delta": t})
		}
		ev("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	ev("response.completed", map[string]any{"response": resp("completed", output)})
}
