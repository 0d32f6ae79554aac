package replay

// WithLimits lowers the page a match reads at a time and the items one
// replay takes, so that tests cross them with a few rows.
func (s *Store) WithLimits(page, maxItems int) *Store {
	c := *s
	c.page, c.maxItems = page, maxItems
	return &c
}
