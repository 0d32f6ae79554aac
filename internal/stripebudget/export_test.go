package stripebudget

// Running reports whether the budget counts a leasing goroutine as running
// (tests: a leaser that died must not stay marked running, or no request
// would ever be served again).
func (b *Shared) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running
}
