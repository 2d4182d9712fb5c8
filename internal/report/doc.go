// Package report is agent-lock's event model and its headless output.
//
// The kernel decides every verdict and reports it on a ring buffer; by the
// time an [Event] reaches this package the decision is final. report only
// presents: it writes a session as JSON lines (for machines, see
// docs/report-schema.md) or as one-line text records (for people), reads the
// JSON back for replay, flags paths that hold secrets, and aggregates repeated
// escapes with a bounded [Tally]. It never re-derives a verdict.
//
// Paths and command names come from the agent and the filesystem, so they are
// hostile input: any byte but NUL may appear. Both formats keep one record on
// one line whatever the bytes, and the JSON form carries raw bytes that are not
// valid UTF-8 in a base64 twin field so nothing is lost.
package report
