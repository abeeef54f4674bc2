package sqsconsumer

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readmeOptionsHeading is the heading of the README section whose first
// table lists every option.
const readmeOptionsHeading = "## Options"

// readmeTableExtras are the exported functions the options table lists
// although they return no Option: Batch makes the Handler a batch needs.
var readmeTableExtras = []string{"Batch"}

// TestReadmeOptionsTable keeps the README's options table complete and
// true: every exported function of this package that returns an Option or
// a LeaseOption (the bundles Options and LeaseOptions included), and
// Batch, has exactly one row, each row names one of them, and no row
// leaves a column empty. The functions are read from the package's source
// with go/parser, so a new option without its row fails here.
func TestReadmeOptionsTable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	rows, err := readmeOptionRows(string(readme))
	require.NoError(t, err)
	want, err := exportedOptionFuncs(".")
	require.NoError(t, err)
	require.NotEmpty(t, want)
	if problems := compareOptionRows(rows, want); len(problems) > 0 {
		t.Fatalf("README.md's options table (under %q) and the package's options differ:\n%s",
			readmeOptionsHeading, strings.Join(problems, "\n"))
	}

	// The comparison catches a row taken out, whichever it is, and a row
	// for a function that is not an option.
	for i, r := range rows {
		less := slices.Delete(slices.Clone(rows), i, i+1)
		require.Contains(t, strings.Join(compareOptionRows(less, want), "\n"), "option "+r.name+" has no row",
			"removing the row of %s must be reported", r.name)
	}
	more := append(slices.Clone(rows), optionRow{name: "WithNothing", line: 1, cells: rows[0].cells})
	require.Contains(t, strings.Join(compareOptionRows(more, want), "\n"), "WithNothing")
}

// optionRow is one row of the README's options table.
type optionRow struct {
	name  string   // the function the first cell names
	line  int      // its line in the README, from 1
	cells []string // every cell, trimmed
}

// readmeOptionRows returns the rows of the first table under the options
// heading. The first cell of each row must be the function's call in
// backquotes, `WithX(args)`.
func readmeOptionRows(readme string) ([]optionRow, error) {
	lines := strings.Split(readme, "\n")
	start := slices.Index(lines, readmeOptionsHeading)
	if start < 0 {
		return nil, fmt.Errorf("README.md has no line %q", readmeOptionsHeading)
	}
	var rows []optionRow
	header := -1
	for i := start + 1; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "## ") {
			break
		}
		if !strings.HasPrefix(l, "|") {
			if header >= 0 {
				break // the table ended
			}
			continue
		}
		cells := tableCells(l)
		switch {
		case header < 0:
			header = len(cells)
			if len(cells) < 2 || cells[0] != "option" {
				return nil, fmt.Errorf("README.md line %d: the options table's first column must be \"option\", got %q", i+1, l)
			}
			continue
		case strings.Trim(l, "|-: ") == "":
			continue // the delimiter row
		}
		if len(cells) != header {
			return nil, fmt.Errorf("README.md line %d: %d cells, the header has %d: %q", i+1, len(cells), header, l)
		}
		first := cells[0]
		open := strings.Index(first, "(")
		if !strings.HasPrefix(first, "`") || !strings.HasSuffix(first, ")`") || open < 0 || strings.Count(first, "`") != 2 {
			return nil, fmt.Errorf("README.md line %d: the first cell must be one call in backquotes, such as `WithConcurrency(n)`: %q", i+1, first)
		}
		rows = append(rows, optionRow{name: first[1:open], line: i + 1, cells: cells})
	}
	if header < 0 {
		return nil, fmt.Errorf("README.md: no table under %q", readmeOptionsHeading)
	}
	return rows, nil
}

// tableCells splits a Markdown table row into its trimmed cells.
func tableCells(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(row), "|"), "|")
	cells := strings.Split(row, "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// exportedOptionFuncs returns the names of the exported functions (not
// methods) declared in dir's non-test Go files that return one Option or
// LeaseOption, and the readmeTableExtras declared there.
func exportedOptionFuncs(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var names []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() {
				continue
			}
			if slices.Contains(readmeTableExtras, fn.Name.Name) || returnsOption(fn.Type) {
				names = append(names, fn.Name.Name)
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// returnsOption reports whether a function's only result is an Option or
// a LeaseOption.
func returnsOption(ft *ast.FuncType) bool {
	if ft.Results == nil || len(ft.Results.List) != 1 || len(ft.Results.List[0].Names) > 1 {
		return false
	}
	id, ok := ft.Results.List[0].Type.(*ast.Ident)
	return ok && (id.Name == "Option" || id.Name == "LeaseOption")
}

// compareOptionRows lists, one line each, the options without a row, the
// rows naming no option, the options with more than one row, and the rows
// with an empty cell.
func compareOptionRows(rows []optionRow, options []string) []string {
	var problems []string
	seen := map[string]int{}
	for _, r := range rows {
		if prev, ok := seen[r.name]; ok {
			problems = append(problems, fmt.Sprintf("README.md line %d: a second row for %s (the first is on line %d)", r.line, r.name, prev))
		}
		seen[r.name] = r.line
		if !slices.Contains(options, r.name) {
			problems = append(problems, fmt.Sprintf("README.md line %d: a row for %s, which is not an exported function of the package returning Option or LeaseOption (nor %s)",
				r.line, r.name, strings.Join(readmeTableExtras, ", ")))
		}
		for i, c := range r.cells {
			if c == "" {
				problems = append(problems, fmt.Sprintf("README.md line %d: the row of %s has an empty cell (column %d): write \"-\" where nothing applies", r.line, r.name, i+1))
			}
		}
	}
	for _, o := range options {
		if _, ok := seen[o]; !ok {
			problems = append(problems, fmt.Sprintf("option %s has no row in README.md's options table", o))
		}
	}
	return problems
}

// TestReadmeSectionsCited keeps the doc comments' pointers into the README
// true: every `README's "X"`, `the README, "X"` and `README, section "X"`
// in the repository's Go files (tests aside) names a heading of README.md
// (its whole text, or its text before a colon).
func TestReadmeSectionsCited(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	headings := map[string]bool{}
	for _, l := range strings.Split(string(readme), "\n") {
		if text, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " "); ok && strings.HasPrefix(l, "##") {
			headings[text] = true
			if before, _, ok := strings.Cut(text, ":"); ok {
				headings[before] = true
			}
		}
	}
	cite := regexp.MustCompile(`README(?:'s|, section|,) "([^"]+)"`)
	var wrong []string
	cited := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// Comments wrap: read the file as one line of words.
		text := strings.Join(strings.Fields(strings.ReplaceAll(string(src), "//", "")), " ")
		for _, m := range cite.FindAllStringSubmatch(text, -1) {
			cited++
			if !headings[m[1]] {
				wrong = append(wrong, fmt.Sprintf("%s cites the README's %q, which is no heading of README.md", path, m[1]))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.NotZero(t, cited, "the doc comments cite README sections")
	if len(wrong) > 0 {
		t.Fatal(strings.Join(wrong, "\n"))
	}
}
