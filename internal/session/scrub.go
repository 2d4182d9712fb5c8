package session

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/agent-lock/agent-lock/internal/secretenv"
)

// The scrubber of the shell files' copies (shellrc.go). It reads shell
// the way a careful eye does, not as a shell would: a line that assigns a
// secret-looking variable leaves the copy with all it runs on to (a
// quoted value, a continuation, a here-document, a $( ) left open), and
// where it cannot tell where that ends, the rest of the file goes too.
// Assignments only: a token written into a command stays.

var (
	// An assignment at the start of a command (one quoted in an alias or
	// an eval included): NAME=..., with export, declare -x, typeset,
	// readonly or local before it.
	assignment = regexp.MustCompile(`(?:^|[\s;&|('"` + "`" + `])(?:export\s+|declare\s+-\w+\s+|typeset\s+-\w+\s+|readonly\s+|local\s+)*([A-Za-z_][A-Za-z0-9_]*)\+?=`)
	// fish's set -x NAME, printf -v NAME.
	fishSet = regexp.MustCompile(`^\s*set\s+(?:-\w+\s+)*([A-Za-z_][A-Za-z0-9_]*)\s`)
	printfV = regexp.MustCompile(`(?:^|[\s;&|(])printf\s+-v\s*["']?([A-Za-z_][A-Za-z0-9_]*)`)
	// read's arguments: every name among them counts.
	readArgs = regexp.MustCompile(`(?:^|[\s;&|(])read\s+([^;&|<>]*)`)
	name     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// secretAssigned is the first secret-looking name line assigns, "" for
// none.
func secretAssigned(line string) string {
	var names []string
	for _, m := range assignment.FindAllStringSubmatch(line, -1) {
		names = append(names, m[1])
	}
	for _, re := range []*regexp.Regexp{fishSet, printfV} {
		if m := re.FindStringSubmatch(line); m != nil {
			names = append(names, m[1])
		}
	}
	for _, m := range readArgs.FindAllStringSubmatch(line, -1) {
		for _, f := range strings.Fields(m[1]) {
			if name.MatchString(f) {
				names = append(names, f)
			}
		}
	}
	for _, n := range names {
		if secretenv.Secret(n) {
			return n
		}
	}
	return ""
}

// scrubRC returns content without the statements that assign a
// secret-looking variable, each replaced by a comment naming the
// variable, and the names withheld. The rest (PATH, aliases, functions,
// options, here-documents' text) is kept as the user wrote it.
func scrubRC(content string) (string, []string) {
	lines := strings.SplitAfter(content, "\n")
	var out strings.Builder
	var withheld []string
	withhold := func(secret string) {
		withheld = append(withheld, secret)
		fmt.Fprintf(&out, ": # agent-lock: the assignment of %s is withheld from the agent\n", secret)
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		secret := secretAssigned(line)
		if secret == "" {
			out.WriteString(line)
			// The documents this line opens are text: copied, but for
			// their lines that assign a secret (a config written out).
			for _, d := range shellScan(line).docs {
				for i+1 < len(lines) {
					i++
					if d.ends(lines[i]) {
						out.WriteString(lines[i])
						break
					}
					if s := secretAssigned(lines[i]); s != "" {
						withhold(s)
					} else {
						out.WriteString(lines[i])
					}
				}
			}
			continue
		}
		withhold(secret)
		i = statementEnd(lines, i)
	}
	return out.String(), withheld
}

// statementEnd is the last line of the statement that starts at line i:
// through its open quotes and continuations, the bodies of the
// here-documents it opens, and the $( and ( it leaves open; the last line
// of all where it does not end.
func statementEnd(lines []string, i int) int {
	text := lines[i]
	for {
		sc := shellScan(text)
		if sc.quoted || sc.continued {
			if i+1 >= len(lines) {
				return i
			}
			i++
			text += lines[i]
			continue
		}
		// Each document's body follows the line that opened it, in turn
		// (unless a quote ran on over it, and its end is in text).
		joined := strings.SplitAfter(text, "\n")[1:]
		for _, d := range sc.docs {
			if slices.ContainsFunc(joined, d.ends) {
				continue
			}
			for {
				if i+1 >= len(lines) {
					return i
				}
				i++
				if d.ends(lines[i]) {
					break
				}
			}
		}
		if sc.depth <= 0 {
			return i
		}
		// A $( left open: what follows belongs to it until it closes.
		if i+1 >= len(lines) {
			return i
		}
		i++
		// The next round scans the parentheses still open and this line.
		text = strings.Repeat("(", sc.depth) + lines[i]
	}
}

// heredoc is a here-document a line opens: its body ends at a line that
// is the delimiter (after its leading tabs, with <<-).
type heredoc struct {
	delim string
	tabs  bool
}

func (d heredoc) ends(line string) bool {
	l := strings.TrimSuffix(line, "\n")
	if d.tabs {
		l = strings.TrimLeft(l, "\t")
	}
	return l == d.delim
}

// scan is what shellScan found in some text.
type scan struct {
	quoted    bool      // a quote left open
	continued bool      // a backslash at its end
	depth     int       // ( opened and not closed, outside quotes and comments
	docs      []heredoc // here-documents opened, in order
}

// shellScan reads text as the shell's tokenizer would, as far as the
// scrubber needs: quotes, comments, backslashes, parentheses and
// here-document operators (not here-strings, <<<).
func shellScan(text string) scan {
	var sc scan
	var q byte
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case q == 0 && c == '#' && (i == 0 || strings.IndexByte(" \t\n;&|(", text[i-1]) >= 0):
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == '\\' && q != '\'' && i+1 < len(text):
			i++
		case q == 0 && (c == '\'' || c == '"'):
			q = c
		case c == q:
			q = 0
		case q == 0 && c == '(':
			sc.depth++
		case q == 0 && c == ')':
			sc.depth--
		case q == 0 && strings.HasPrefix(text[i:], "<<<"):
			i += 2 // a here-string: its word is on this line
		case q == 0 && strings.HasPrefix(text[i:], "<<"):
			d, n := heredocAt(text[i+2:])
			if d.delim != "" {
				sc.docs = append(sc.docs, d)
			}
			i += 1 + n
		}
	}
	sc.quoted = q != 0
	sc.continued = strings.HasSuffix(strings.TrimRight(text, "\n"), "\\")
	return sc
}

// heredocAt reads the operator's rest: an optional -, blanks, and the
// delimiter word, whose quotes and backslashes are removed (as bash
// does); n is how much it read.
func heredocAt(s string) (d heredoc, n int) {
	if strings.HasPrefix(s, "-") {
		d.tabs = true
		n++
	}
	for n < len(s) && (s[n] == ' ' || s[n] == '\t') {
		n++
	}
	var w strings.Builder
	var q byte
	for ; n < len(s); n++ {
		c := s[n]
		switch {
		case q != 0 && c == q:
			q = 0
		case q != 0:
			w.WriteByte(c)
		case c == '\'' || c == '"':
			q = c
		case c == '\\' && n+1 < len(s):
			n++
			w.WriteByte(s[n])
		case strings.IndexByte(" \t\n;&|<>()", c) >= 0:
			d.delim = w.String()
			return d, n
		default:
			w.WriteByte(c)
		}
	}
	d.delim = w.String()
	return d, n
}
