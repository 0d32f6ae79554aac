package model

// DeclineText is how a failed payment's error is stored and shown: "code:
// message", or whichever of the two Stripe gave; with neither, a sentence
// saying so (never ": ").
func DeclineText(code, message string) string {
	switch {
	case code != "" && message != "":
		return code + ": " + message
	case code != "":
		return code
	case message != "":
		return message
	}
	return "declined (Stripe gave no code or message)"
}
