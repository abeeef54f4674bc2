package ecsprotect_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The package imports nothing but the standard library, so the root
// package can use it without a new dependency.
func TestOnlyStandardLibrary(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, pkg := range strings.Fields(string(out)) {
		first := strings.SplitN(pkg, "/", 2)[0]
		if !strings.Contains(first, ".") || strings.HasPrefix(pkg, "vendor/") {
			continue // standard library
		}
		require.Equal(t, "github.com/sqskit/sqsconsumer/ecsprotect", pkg, "ecsprotect depends on %s", pkg)
	}
}
