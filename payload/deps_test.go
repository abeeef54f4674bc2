package payload

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The package needs nothing beyond the root module's own dependencies: the
// standard library, the AWS SDK's SQS types and the root package.
func TestDependencies(t *testing.T) {
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
		ok := strings.HasPrefix(pkg, "github.com/aws/aws-sdk-go-v2") ||
			strings.HasPrefix(pkg, "github.com/aws/smithy-go") ||
			strings.HasPrefix(pkg, "github.com/sqskit/sqsconsumer")
		require.True(t, ok, "package payload depends on %s", pkg)
	}
}
