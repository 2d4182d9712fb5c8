package dashboard

import (
	"fmt"
	"regexp"
	"strings"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
)

// DefaultFlipKey switches between the agent's pane and the full dashboard.
// Ctrl-] is telnet's escape key: no common agent (Claude Code, Codex,
// Gemini CLI, Aider), shell, pager or editor but vim's tag jump binds it,
// and it passes through every terminal and multiplexer.
const DefaultFlipKey = "ctrl+]"

// keyMap is every key the dashboard knows, with its help.
type keyMap struct {
	Up, Down, PageUp, PageDown, Top, Bottom key.Binding
	Detail, Back, Copy, Quit                key.Binding
	// The one-terminal session's: Flip shows the agent's pane or the
	// dashboard, Detach leaves the session running without a terminal,
	// Back and Forth scroll the pane through what scrolled off the
	// agent's screen (the keys terminals scroll back with).
	Flip, Detach, ScrollBack, ScrollForth key.Binding
	pane                                  bool
}

func newKeyMap(pane bool, flip string) keyMap {
	k := keyMap{
		Up:       key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑↓/jk", "move")),
		Down:     key.NewBinding(key.WithKeys("down", "j")),
		PageUp:   key.NewBinding(key.WithKeys("pgup"), key.WithHelp("PgUp/PgDn", "page")),
		PageDown: key.NewBinding(key.WithKeys("pgdown")),
		Top:      key.NewBinding(key.WithKeys("g", "home"), key.WithHelp("g/G", "ends")),
		Bottom:   key.NewBinding(key.WithKeys("G", "end")),
		Detail:   key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "detail")),
		Back:     key.NewBinding(key.WithKeys("esc")),
		Copy:     key.NewBinding(key.WithKeys("c"), key.WithHelp("c", "copy summary")),
		Quit:     key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
		pane:     pane,
	}
	if pane {
		k.Flip = key.NewBinding(key.WithKeys(flip), key.WithHelp(flip, "agent"))
		k.Back.SetHelp("", "")
		k.Detach = key.NewBinding(key.WithKeys("d"), key.WithHelp("d", "detach"))
		k.ScrollBack = key.NewBinding(key.WithKeys("shift+pgup"), key.WithHelp("shift+PgUp", "scroll back"))
		k.ScrollForth = key.NewBinding(key.WithKeys("shift+pgdown"), key.WithHelp("shift+PgDn", "scroll forth"))
		// Ctrl-C is the agent's key: in the dashboard it must not end
		// the session by a slip of the finger.
		k.Quit = key.NewBinding(key.WithKeys("q"), key.WithHelp("q", "end session"))
	} else {
		k.Flip.Unbind()
		k.Detach.Unbind()
		k.ScrollBack.Unbind()
		k.ScrollForth.Unbind()
	}
	return k
}

// ShortHelp is the footer's list (help.KeyMap).
func (k keyMap) ShortHelp() []key.Binding {
	if k.pane {
		// What only this session has first: a narrow footer drops the end.
		return []key.Binding{k.Flip, k.Detach, k.Quit, k.Detail, k.Copy, k.Up, k.PageUp, k.Top}
	}
	return []key.Binding{k.Up, k.PageUp, k.Top, k.Detail, k.Copy, k.Quit}
}

func (k keyMap) FullHelp() [][]key.Binding { return [][]key.Binding{k.ShortHelp()} }

// newHelp renders the keys as the footer does: dim, separated by dots.
func newHelp() help.Model {
	h := help.New()
	h.ShortSeparator = " · "
	h.Styles = help.Styles{}
	return h
}

var keyName = regexp.MustCompile(`^((ctrl|alt)\+)?([a-z]|[\]\\^_@]|f([1-9]|1[0-2]))$`)

// CheckFlipKey says what is wrong with a key asked for by --pane-key: it
// must be one a terminal sends on its own (a control or alt combination,
// or a function key), and none the agent needs to be sent (Ctrl-C, Ctrl-D,
// Ctrl-Z, Ctrl-\ are the agent's signals and end of input).
func CheckFlipKey(k string) error {
	if !keyName.MatchString(k) || (!strings.Contains(k, "+") && len(k) == 1) {
		return fmt.Errorf("%q is not a key agent-lock can take: give a control or alt combination or a function key, e.g. ctrl+], ctrl+^, alt+a, f12", k)
	}
	switch k {
	case "ctrl+c", "ctrl+d", "ctrl+z", "ctrl+\\", "ctrl+m", "ctrl+i", "ctrl+h", "ctrl+[":
		return fmt.Errorf("%s is the agent's (interrupt, end of input, suspend, quit, enter, tab, backspace, escape): pick another, e.g. %s", k, DefaultFlipKey)
	}
	return nil
}
