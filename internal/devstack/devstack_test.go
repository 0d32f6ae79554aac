// Package devstack holds no code: its tests hold scripts/devstack.sh to
// what a developer running two checkouts, or `make reset` beside `make
// run`, expects: a refusal that names what to change, never a silent share
// or a wipe under a live service.
package devstack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the module root: tests run in their package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "go.mod not found above the test's directory")
		dir = parent
	}
}

// otherCheckout lays out a second checkout holding only the scripts, with
// this checkout's installed packages linked in (so nothing is downloaded).
func otherCheckout(t *testing.T, root string) string {
	t.Helper()
	other := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(other, "scripts"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(other, ".dev"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(other, "scripts", "sqs"), 0o755))
	for _, f := range []string{"devstack.sh", "run.sh", "sqs/package.json", "sqs/package-lock.json", "sqs/serve.mjs"} {
		b, err := os.ReadFile(filepath.Join(root, "scripts", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(other, "scripts", f), b, 0o755))
	}
	for _, d := range []string{"npm", "sqs"} {
		require.DirExists(t, filepath.Join(root, ".dev", d), "the local stack is not installed in this checkout: run make stack-up")
		require.NoError(t, os.Symlink(filepath.Join(root, ".dev", d), filepath.Join(other, ".dev", d)))
	}
	return other
}

// devstack runs the script of checkout dir with the test stack's ports.
func devstack(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "scripts", "devstack.sh"), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The stack `make test` runs on was started from this checkout: `make run`
// (DEVSTACK_REFUSE_FOREIGN=1) from another checkout on the same ports is
// refused, naming this checkout and the DEV_* variable to change.
func TestMakeRunRefusesAnotherCheckoutsStack(t *testing.T) {
	root := repoRoot(t)
	require.NotEmpty(t, os.Getenv("DYNAMODB_ENDPOINT"), "run through make test: it starts the local stack")
	other := otherCheckout(t, root)

	out, err := devstack(t, other, []string{"DEVSTACK_REFUSE_FOREIGN=1"}, "up")
	require.Error(t, err, "up from another checkout must refuse the stack this one started:\n%s", out)
	assert.Contains(t, out, "belongs to another checkout ("+root+")")
	assert.Regexp(t, `set DEV_(DYNAMO|PG|SQS)_PORT`, out)

	// Nothing of this checkout's stack was stopped by the refusal.
	st, err := devstack(t, root, nil, "status")
	require.NoError(t, err, "the stack still answers after the refusal:\n%s", st)
}

// `make reset` while `make run` runs from the same checkout is refused and
// wipes nothing.
func TestResetRefusesWhileMakeRunRuns(t *testing.T) {
	root := repoRoot(t)
	other := otherCheckout(t, root)
	// A process whose command line is the run script's, standing in for a
	// live `make run` of the other checkout.
	run := exec.Command("bash", "-c", "exec -a scripts/run.sh sleep 60")
	require.NoError(t, run.Start())
	t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(run.Process.Pid) + "/cmdline")
		return strings.HasPrefix(string(b), "scripts/run.sh")
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, os.WriteFile(filepath.Join(other, ".dev", "run.pid"), []byte(strconv.Itoa(run.Process.Pid)+"\n"), 0o644))
	marker := filepath.Join(other, ".dev", "stripe-local", "state.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(marker), 0o755))
	require.NoError(t, os.WriteFile(marker, []byte("{}"), 0o644))

	out, err := devstack(t, other, nil, "reset")
	require.Error(t, err, "reset must refuse while make run runs:\n%s", out)
	assert.Contains(t, out, "make run is running from this checkout")
	assert.FileExists(t, marker, "a refused reset wipes nothing")

	// Once make run has ended, reset goes ahead.
	_ = run.Process.Kill()
	_ = run.Wait()
	out, err = devstack(t, other, nil, "reset")
	require.NoError(t, err, out)
	assert.NoFileExists(t, marker)
}
