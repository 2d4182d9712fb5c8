package session

import "testing"

func TestSessionPID(t *testing.T) {
	for name, want := range map[string]int{"s123-abcd": 123, "s1-x": 1} {
		if pid, ok := sessionPID(name); !ok || pid != want {
			t.Errorf("sessionPID(%q) = %d, %v", name, pid, ok)
		}
	}
	for _, name := range []string{"test-abcd", "s-abcd", "sx-1", "s12", "s0-a", "agent"} {
		if _, ok := sessionPID(name); ok {
			t.Errorf("sessionPID(%q) accepted", name)
		}
	}
}
