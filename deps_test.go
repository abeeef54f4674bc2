package sqsconsumer

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The root package pulls in nothing but the standard library, the AWS SDK
// and smithy-go: Redis, PostgreSQL, DynamoDB and OpenTelemetry stay in
// subpackages.
func TestRootDependencies(t *testing.T) {
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
		require.True(t, ok, "the root package depends on %s", pkg)
	}
}
