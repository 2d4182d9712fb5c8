package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/agent-lock/agent-lock/internal/profile"
)

// profiles prints every profile and what it grants, home-relative.
func profiles(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "agent-lock profiles: takes no arguments (got %s)\n", strings.Join(args, " "))
		return 2
	}
	fmt.Fprintln(stdout, "Profiles grant what an agent needs beyond DIR; agent-lock picks the one its command's")
	fmt.Fprintln(stdout, "name selects, or --profile NAME. Paths that do not exist are not granted, but for")
	fmt.Fprintln(stdout, "files granted by name; the home's secrets (~/.ssh, ~/.aws, ...) stay refused inside")
	fmt.Fprintln(stdout, "every grant. The network hosts are granted unless --net off or --net open.")
	tilde := func(ps []string) string {
		var out []string
		for _, p := range ps {
			out = append(out, "~/"+p)
		}
		return strings.Join(out, " ")
	}
	for _, p := range profile.All() {
		fmt.Fprintf(stdout, "\n%s: %s\n", p.Name, p.Agent)
		fmt.Fprintf(stdout, "  selected by   %s\n", strings.Join(p.Commands, " "))
		if len(p.Uses) > 0 {
			fmt.Fprintf(stdout, "  with          %s\n", strings.Join(p.Uses, " "))
		}
		if len(p.Write) > 0 {
			fmt.Fprintf(stdout, "  read-write    %s\n", tilde(p.Write))
		}
		if len(p.Files) > 0 {
			fmt.Fprintf(stdout, "  by name       %s (read-write, made if missing, with the siblings its saves make: NAME.*)\n", tilde(p.Files))
		}
		if len(p.Read) > 0 {
			fmt.Fprintf(stdout, "  read-only     %s\n", tilde(p.Read))
		}
		if len(p.Env) > 0 {
			fmt.Fprintf(stdout, "  passes env    %s\n", strings.Join(p.Env, " "))
		}
		if len(p.Hosts) > 0 {
			fmt.Fprintf(stdout, "  network       %s\n", strings.Join(p.Hosts, " "))
		}
	}
	return 0
}
