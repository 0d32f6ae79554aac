// Package stripeid is the one check of Stripe object ids used everywhere an
// id comes in: webhook payloads, the internal API, the purchase and billing
// requests. The service stores ids as DynamoDB keys and Postgres text and
// puts them in Stripe API paths and idempotency keys, so an id must not be
// able to break any of those.
package stripeid

// maxBody bounds what follows the prefix. Stripe's ids are far shorter
// (about 30 characters); the bound only keeps keys and paths small.
const maxBody = 250

// Valid reports whether id looks like a Stripe id with the given prefix
// ("evt_", "acct_", "pi_", "sub_", "in_", ...): the prefix, then 1 to 250
// letters, digits or underscores.
func Valid(id, prefix string) bool {
	if len(id) <= len(prefix) || len(id) > len(prefix)+maxBody || id[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
