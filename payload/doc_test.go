package payload

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The package documentation sends readers to the repository's README for
// the figures: the section it names must be there, and it must not call
// the README the module's, as if payload were a module of its own.
func TestDocCitesTheREADME(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	text := strings.Join(strings.Fields(strings.ReplaceAll(string(doc), "//", "")), " ")
	require.NotContains(t, text, "module's README")
	cites := regexp.MustCompile(`README, section "([^"]+)"`).FindAllStringSubmatch(text, -1)
	require.NotEmpty(t, cites, "the doc cites the README's figures by section")
	for _, c := range cites {
		require.Regexp(t, "(?m)^## "+regexp.QuoteMeta(c[1])+"$", string(readme), "README section %q", c[1])
	}
}
