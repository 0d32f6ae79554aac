// Command testsummary reads `go test -json` on stdin and writes what plain
// `go test` would have written (each package's ok/FAIL line, the output of
// failed tests, build errors), then one line: "N passed, N failed, N
// skipped" (every test and subtest). It exits 1 when a test or a package
// failed. scripts/test.sh pipes `make test`'s go test run through it.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
)

type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

// Counts are the tests' results.
type Counts struct{ Passed, Failed, Skipped, PackagesFailed int }

func main() {
	verbose := flag.Bool("v", false, "copy every test's output, as go test -v does")
	flag.Parse()
	c, err := summarize(os.Stdin, os.Stdout, *verbose)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if c.Failed > 0 || c.PackagesFailed > 0 {
		os.Exit(1)
	}
}

// summarize copies go test's own lines from the JSON stream in to out and
// ends with the summary line. Lines that are not JSON (a build error
// printed by an older go) are copied as they are.
func summarize(in io.Reader, out io.Writer, verbose bool) (Counts, error) {
	var c Counts
	pending := map[string][]string{} // package/test -> its output so far
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "output":
			if e.Test == "" && e.Output == "PASS\n" && !verbose {
				continue // -json runs tests verbosely; plain go test prints only "ok"
			}
			if e.Test == "" || verbose {
				fmt.Fprint(out, e.Output) // ok, FAIL, panics outside tests, coverage
			} else {
				pending[key] = append(pending[key], e.Output)
			}
		case "pass", "skip", "fail":
			if e.Test == "" {
				if e.Action == "fail" {
					c.PackagesFailed++
				}
				continue
			}
			switch e.Action {
			case "pass":
				c.Passed++
			case "skip":
				c.Skipped++
			case "fail":
				c.Failed++
				for _, o := range pending[key] { // empty when verbose: already copied
					fmt.Fprint(out, o)
				}
			}
			delete(pending, key)
		}
	}
	if err := sc.Err(); err != nil {
		return c, err
	}
	// A test still running when its package ended (a panic, a timeout):
	// its output says why.
	for _, lines := range pending {
		for _, o := range lines {
			fmt.Fprint(out, o)
		}
	}
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", c.Passed, c.Failed, c.Skipped)
	return c, nil
}
