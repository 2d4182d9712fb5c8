package modelserver

import (
	"encoding/json"
	"net/http"
	"sort"
)

// Gemini's generateContent and streamGenerateContent
// (POST /v1beta/models/MODEL:streamGenerateContent?alt=sse), as Gemini CLI
// uses them: the conversation is contents of parts, the agent's tools are
// functionDeclarations; a tool result is a functionResponse part naming the
// call's id; answers are GenerateContentResponse objects, streamed as
// data-only server-sent events. Gemini CLI also asks for JSON answers on
// the side (which model to route to, who speaks next): those get a value
// made from the schema they give.

type geminiRequest struct {
	Contents []struct {
		Role  string           `json:"role"`
		Parts []map[string]any `json:"parts"`
	} `json:"contents"`
	Tools []struct {
		FunctionDeclarations []struct {
			Name                 string         `json:"name"`
			Parameters           map[string]any `json:"parameters"`
			ParametersJSONSchema map[string]any `json:"parametersJsonSchema"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	GenerationConfig struct {
		ResponseMimeType   string         `json:"responseMimeType"`
		ResponseSchema     map[string]any `json:"responseSchema"`
		ResponseJSONSchema map[string]any `json:"responseJsonSchema"`
	} `json:"generationConfig"`
}

func (s *Server) gemini(w http.ResponseWriter, body []byte, idx int, stream bool) {
	var req geminiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.errorf("gemini: %v", err)
		http.Error(w, `{"error":{"code":400,"message":"bad json","status":"INVALID_ARGUMENT"}}`, http.StatusBadRequest)
		return
	}
	params := map[string][]string{} // tool -> its parameter names
	for _, t := range req.Tools {
		for _, f := range t.FunctionDeclarations {
			schema := f.ParametersJSONSchema
			if schema == nil {
				schema = f.Parameters
			}
			var names []string
			if props, ok := schema["properties"].(map[string]any); ok {
				for k := range props {
					names = append(names, k)
				}
			}
			sort.Strings(names)
			params[f.Name] = names
		}
	}
	if _, ok := params["run_shell_command"]; !ok {
		s.side(idx)
		answer := "ok"
		schema := req.GenerationConfig.ResponseJSONSchema
		if schema == nil {
			schema = req.GenerationConfig.ResponseSchema
		}
		if schema != nil || req.GenerationConfig.ResponseMimeType == "application/json" {
			b, _ := json.Marshal(fromSchema(schema))
			answer = string(b)
		}
		s.geminiReply(w, stream, map[string]any{"text": answer})
		return
	}
	results := map[string]string{}
	for _, c := range req.Contents {
		for _, p := range c.Parts {
			fr, ok := p["functionResponse"].(map[string]any)
			if !ok {
				continue
			}
			if id, ok := fr["id"].(string); ok {
				results[id] = text(fr["response"])
			}
		}
	}
	next := s.answer(idx, results)
	if next >= len(s.script) {
		s.geminiReply(w, stream, map[string]any{"text": FinalText})
		return
	}
	name, args := geminiCall(s.script[next], params)
	s.geminiReply(w, stream, map[string]any{"functionCall": map[string]any{"id": callID("gemini", next), "name": name, "args": args}})
}

// geminiCall is step st as a call of one of Gemini CLI's tools, with the
// parameter names it declared.
func geminiCall(st Step, params map[string][]string) (string, map[string]any) {
	has := func(tool, param string) bool {
		for _, p := range params[tool] {
			if p == param {
				return true
			}
		}
		return false
	}
	pathParam := func(tool string) string {
		for _, p := range []string{"file_path", "absolute_path", "path"} {
			if has(tool, p) {
				return p
			}
		}
		return ""
	}
	switch {
	case st.Write != nil && pathParam("write_file") != "" && has("write_file", "content"):
		return "write_file", map[string]any{pathParam("write_file"): st.Write.Path, "content": st.Write.Content}
	case st.Write != nil:
		return "run_shell_command", map[string]any{"command": heredoc(st.Write.Path, st.Write.Content), "description": st.Name}
	case st.Edit != nil && pathParam("replace") != "" && has("replace", "old_string"):
		args := map[string]any{pathParam("replace"): st.Edit.Path, "old_string": st.Edit.Old, "new_string": st.Edit.New}
		if has("replace", "instruction") {
			args["instruction"] = st.Name
		}
		return "replace", args
	case st.Edit != nil:
		return "run_shell_command", map[string]any{"command": sedEdit(st.Edit), "description": st.Name}
	}
	args := map[string]any{"command": st.Shell}
	if has("run_shell_command", "description") {
		args["description"] = st.Name
	}
	return "run_shell_command", args
}

func (s *Server) geminiReply(w http.ResponseWriter, stream bool, part map[string]any) {
	resp := map[string]any{
		"candidates": []any{map[string]any{
			"content":      map[string]any{"role": "model", "parts": []any{part}},
			"finishReason": "STOP", "index": 0,
		}},
		"usageMetadata": map[string]any{"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120},
		"modelVersion":  "agentlock-scripted",
	}
	if !stream {
		writeJSON(w, resp)
		return
	}
	newSSE(w).event("", resp)
}

// fromSchema makes a value that fits a JSON schema: an enum's first value,
// an object with its required properties. Gemini CLI's side questions are
// answered this way (for "who speaks next", the first choice is "user":
// the turn ends, as a model with nothing more to do would say).
func fromSchema(schema map[string]any) any {
	if schema == nil {
		return map[string]any{}
	}
	if enum, ok := schema["enum"].([]any); ok && len(enum) > 0 {
		return enum[0]
	}
	typ, _ := schema["type"].(string)
	switch typ {
	case "object", "OBJECT", "":
		out := map[string]any{}
		props, _ := schema["properties"].(map[string]any)
		for k, v := range props {
			sub, _ := v.(map[string]any)
			out[k] = fromSchema(sub)
		}
		return out
	case "array", "ARRAY":
		return []any{}
	case "string", "STRING":
		return "scripted"
	case "integer", "INTEGER", "number", "NUMBER":
		if min, ok := schema["minimum"].(float64); ok {
			return min
		}
		return 0
	case "boolean", "BOOLEAN":
		return false
	}
	return nil
}
