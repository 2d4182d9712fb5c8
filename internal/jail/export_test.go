package jail

// Retries is how many registrations this jail asked again (handshakeOpen).
func (j *Jail) Retries() int { return j.retries }

// RecursionMisses is how many times the kernel skipped this jail's programs.
func (j *Jail) RecursionMisses() uint64 { return j.recursionMisses() }
