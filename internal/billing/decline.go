package billing

// HardDecline reports whether Stripe's decline code is one retrying cannot
// fix.
func (s *Service) HardDecline(code string) bool { return code != "" && s.hard[code] }
