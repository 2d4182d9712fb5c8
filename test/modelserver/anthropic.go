package modelserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

// The Anthropic Messages API (POST /v1/messages), as Claude Code uses it:
// the conversation is in messages, the agent's tools in tools; tool results
// come back as tool_result blocks of a user message; answers stream as
// server-sent events (message_start, content blocks with text_delta or
// input_json_delta, message_delta with the stop reason, message_stop).

type anthropicRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

type anthropicBlock struct {
	Type      string `json:"type"`
	ToolUseID string `json:"tool_use_id"`
	Content   any    `json:"content"`
}

func (s *Server) anthropic(w http.ResponseWriter, body []byte, idx int) {
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.errorf("anthropic: %v", err)
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	var tools []string
	for _, t := range req.Tools {
		tools = append(tools, t.Name)
	}
	if !slices.Contains(tools, "Bash") {
		// A side request (a title, a quota probe): a short answer.
		s.side(idx)
		s.anthropicReply(w, req, []any{map[string]any{"type": "text", "text": "ok"}}, "end_turn")
		return
	}
	results := map[string]string{}
	for _, m := range req.Messages {
		var blocks []anthropicBlock
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue // a plain string
		}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				results[b.ToolUseID] = text(b.Content)
			}
		}
	}
	next := s.answer(idx, results)
	if next >= len(s.script) {
		s.anthropicReply(w, req, []any{map[string]any{"type": "text", "text": FinalText}}, "end_turn")
		return
	}
	name, input := anthropicCall(s.script[next], tools)
	s.anthropicReply(w, req, []any{map[string]any{
		"type": "tool_use", "id": callID("toolu", next), "name": name, "input": input,
	}}, "tool_use")
}

// anthropicCall is step st as a call of one of Claude Code's tools.
func anthropicCall(st Step, tools []string) (string, map[string]any) {
	switch {
	case st.Write != nil && slices.Contains(tools, "Write"):
		return "Write", map[string]any{"file_path": st.Write.Path, "content": st.Write.Content}
	case st.Write != nil:
		return "Bash", map[string]any{"command": heredoc(st.Write.Path, st.Write.Content), "description": st.Name}
	case st.Edit != nil && slices.Contains(tools, "Edit"):
		return "Edit", map[string]any{"file_path": st.Edit.Path, "old_string": st.Edit.Old, "new_string": st.Edit.New}
	case st.Edit != nil:
		return "Bash", map[string]any{"command": sedEdit(st.Edit), "description": st.Name}
	}
	// The longest timeout Claude Code takes: past its default (two
	// minutes) it moves the command to the background, and an emulated
	// npm install can take that long.
	return "Bash", map[string]any{"command": st.Shell, "description": st.Name, "timeout": 600000}
}

// anthropicReply answers with content, streamed when the request asked.
// Tool inputs stream as input_json_delta fragments, as the API sends them.
func (s *Server) anthropicReply(w http.ResponseWriter, req anthropicRequest, content []any, stop string) {
	id := fmt.Sprintf("msg_agentlock_%d", len(s.Requests()))
	usage := map[string]any{"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !req.Stream {
		writeJSON(w, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage,
		})
		return
	}
	e := newSSE(w)
	e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{
			"input_tokens": 100, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
	}})
	for i, c := range content {
		block := c.(map[string]any)
		switch block["type"] {
		case "text":
			e.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "text_delta", "text": block["text"]}})
		case "tool_use":
			e.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": block["name"], "input": map[string]any{}}})
			js, _ := json.Marshal(block["input"])
			for _, part := range split(string(js), 3) {
				e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
			}
		}
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	e.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 20}})
	e.event("message_stop", map[string]any{"type": "message_stop"})
}

// split cuts s into n pieces of about equal length, on rune boundaries.
func split(s string, n int) []string {
	r := []rune(s)
	var out []string
	for i := 0; i < n; i++ {
		a, b := len(r)*i/n, len(r)*(i+1)/n
		if a < b {
			out = append(out, string(r[a:b]))
		}
	}
	return out
}
