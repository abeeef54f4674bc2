package sqsconsumer

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The library's packages pull in nothing but the standard library, the AWS
// SDK and smithy-go: Redis, PostgreSQL, DynamoDB, OpenTelemetry, S3 and
// Lambda stay in modules of their own, and testify never leaks out of a
// test.
func TestRootDependencies(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not on PATH")
	}
	for _, dir := range []string{".", "./payload", "./fleet", "./doctor", "./sqstest", "./sqsclient"} {
		out, err := exec.Command(gobin, "list", "-deps", dir).Output()
		require.NoError(t, err)
		for _, pkg := range strings.Fields(string(out)) {
			first := strings.SplitN(pkg, "/", 2)[0]
			if !strings.Contains(first, ".") || strings.HasPrefix(pkg, "vendor/") {
				continue // standard library
			}
			ok := strings.HasPrefix(pkg, "github.com/aws/aws-sdk-go-v2") ||
				strings.HasPrefix(pkg, "github.com/aws/smithy-go") ||
				strings.HasPrefix(pkg, "github.com/sqskit/sqsconsumer")
			require.True(t, ok, "package %s depends on %s", dir, pkg)
		}
	}
}

// The root module's go.mod, which every user's build reads, requires only
// the AWS SDK, smithy-go and the two test libraries: the heavy adapters
// (otelsqs, redisstore, pgstore, dynamostore) are modules of their own, so
// their dependencies never enter a user's module graph through this one.
func TestRootModuleRequirements(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not on PATH")
	}
	cmd := exec.Command(gobin, "mod", "edit", "-json")
	cmd.Env = append(cmd.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	require.NoError(t, err)
	var mod struct {
		Require []struct {
			Path     string
			Indirect bool
		}
	}
	require.NoError(t, json.Unmarshal(out, &mod))
	var direct []string
	for _, r := range mod.Require {
		if r.Indirect {
			continue // pulled in by the AWS SDK's own modules
		}
		direct = append(direct, r.Path)
		ok := strings.HasPrefix(r.Path, "github.com/aws/aws-sdk-go-v2") ||
			r.Path == "github.com/aws/smithy-go" ||
			r.Path == "github.com/stretchr/testify" || // tests only
			r.Path == "go.uber.org/goleak" // tests only
		require.True(t, ok, "the root module requires %s; put what needs it in a module of its own", r.Path)
	}
	require.Contains(t, direct, "github.com/aws/aws-sdk-go-v2/service/sqs")
	for _, m := range []string{"otelsqs", "redisstore", "pgstore", "dynamostore"} {
		_, err := os.Stat(filepath.Join(m, "go.mod"))
		require.NoError(t, err, "%s must be a module of its own", m)
	}
}

// Every module in the repository is in go.work, so the README's test
// command (go test -race github.com/sqskit/sqsconsumer/...) and CI test it.
func TestWorkspaceListsEveryModule(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("go.work")
	require.NoError(t, err)
	used := map[string]bool{}
	inUse := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "use ("):
			inUse = true
		case inUse && line == ")":
			inUse = false
		case inUse && line != "" && !strings.HasPrefix(line, "//"):
			used[filepath.Clean(line)] = true
		case strings.HasPrefix(line, "use "):
			used[filepath.Clean(strings.TrimSpace(strings.TrimPrefix(line, "use ")))] = true
		}
	}
	var missing []string
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" && !used[filepath.Dir(path)] {
			missing = append(missing, filepath.Dir(path))
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, missing, "modules missing from go.work's use list")
	require.True(t, used["."], "go.work must use the root module")
}
