package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The image's build stamps the version and the commit with -X, so an image
// says what it was built from even without Go's VCS stamp (a source
// archive, -buildvcs=false): both show in `stripe-payments version`.
func TestVersionStampedAtLinkTime(t *testing.T) {
	oldVersion, oldCommit := version, commit
	t.Cleanup(func() { version, commit = oldVersion, oldCommit })
	version, commit = "v9.9.9", "0123456789abcdef0123456789abcdef01234567"
	got := versionString()
	assert.True(t, strings.HasPrefix(got, "stripe-payments v9.9.9 (commit 0123456789ab"), got)
}
