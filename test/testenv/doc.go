// Package testenv is what the adversary and real-work suites share: the
// safety guard, the test user, running a command as that user with and
// without agent-lock, reading agent-lock's JSON-lines report, and finding the
// user's processes that outlived a run.
//
// The suites are programs, not go tests, because they run as root inside a
// throwaway VM (AGENT_LOCK_VM=1) and rewrite the test user's home.
package testenv
