package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSummarize(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"p"}`,
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB/sub","Output":"    b_test.go:9: boom\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB/sub"}`,
		`{"Action":"fail","Package":"p","Test":"TestB"}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"--- SKIP: TestC\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestC"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}`,
		`{"Action":"fail","Package":"p"}`,
		`{"Action":"output","Package":"q","Output":"ok  \tq\t0.02s\n"}`,
		`{"Action":"pass","Package":"q"}`,
		`{"ImportPath":"r","Action":"build-output","Output":"r/x.go:1: syntax error\n"}`,
		`# not json`,
	}, "\n")
	var out bytes.Buffer
	c, err := summarize(strings.NewReader(in), &out, false)
	require.NoError(t, err)
	assert.Equal(t, Counts{Passed: 1, Failed: 2, Skipped: 1, PackagesFailed: 1}, c)
	assert.Equal(t, "    b_test.go:9: boom\nFAIL\tp\t0.01s\nok  \tq\t0.02s\nr/x.go:1: syntax error\n# not json\n1 passed, 2 failed, 1 skipped\n", out.String(),
		"go test's own lines, a passing test's output dropped, a failing one's kept, the summary last")
}

func TestSummarizeVerbose(t *testing.T) {
	in := `{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.01s\n"}`
	var out bytes.Buffer
	_, err := summarize(strings.NewReader(in), &out, true)
	require.NoError(t, err)
	assert.Equal(t, "--- PASS: TestA (0.00s)\nok  \tp\t0.01s\n1 passed, 0 failed, 0 skipped\n", out.String())
}
