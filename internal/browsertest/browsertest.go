// Package browsertest starts Debian's headless chromium for the console's
// browser tests, with the flags that keep it off the network: the tests
// of internal/ops and internal/app drive the real console through it.
package browsertest

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// New starts chromium (headless, no sandbox, no background networking),
// 1280 x 900, for the test; it fails the test loudly when chromium is not
// installed, never skips.
func New(t testing.TB) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found on PATH: the console's browser tests need it. Install it: apt-get install -y chromium (scripts/test.sh does)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication,CertificateTransparencyComponentUpdater"),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")), "start chromium")
	return ctx
}

// LogIn opens the console at base (its /ops URL) and signs in with token.
func LogIn(t testing.TB, ctx context.Context, base, token string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SetValue(chromedp.ID("token"), token), chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("open-incidents"))), "log in to the console")
}

// Text is the trimmed text of the first element matching sel, or "" when
// there is none.
func Text(ctx context.Context, sel string) string {
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`((document.querySelector(`+strconv.Quote(sel)+`)||{}).textContent||"").trim()`))
	if err != nil {
		return ""
	}
	return s
}

// Step runs actions within 30 s and fails the test, naming what, if they
// fail.
func Step(t testing.TB, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx, actions...), what)
}
