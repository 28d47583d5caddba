package config_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/obsops/obsops/pkg/problem"
)

// The documentation lives in README.md and docs/*.md. These tests sit with the configuration
// package because the first of them checks the configuration page; the others keep the rest of
// the documentation honest the same way.

// repoRoot is the repository's top directory, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestConfigurationDocumentsEveryVariable keeps the configuration page honest: every OPS_*
// variable a binary reads (an `env:"OPS_..."` tag outside tests) must appear in
// docs/configuration.md.
func TestConfigurationDocumentsEveryVariable(t *testing.T) {
	root := repoRoot(t)
	page, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	tag := regexp.MustCompile(`env:"(OPS_[A-Z0-9_]+)"`)
	found := map[string]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".local" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range tag.FindAllStringSubmatch(string(src), -1) {
			found[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 20 {
		t.Fatalf("found only %d variables: is the walk broken?", len(found))
	}
	for name, path := range found {
		if !strings.Contains(string(page), "`"+name+"`") {
			t.Errorf("%s (read in %s) is missing from docs/configuration.md", name, path)
		}
	}
}

// TestAPIDocumentsEveryProblemType keeps the error vocabulary table of docs/api.md complete: every
// problem type a binary can answer appears there with its status.
func TestAPIDocumentsEveryProblemType(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := problem.Kinds()
	if len(kinds) < 10 {
		t.Fatalf("only %d problem kinds: is the vocabulary broken?", len(kinds))
	}
	for _, k := range kinds {
		row := fmt.Sprintf("| `%s` | %d |", k.Type(), k.Status())
		if !strings.Contains(string(page), row) {
			t.Errorf("docs/api.md's error table has no row %q", row)
		}
	}
}

// maxREADMELines bounds README.md: it introduces the project and points into docs/, which holds
// the rest.
const maxREADMELines = 300

// TestREADMEStaysShort fails when README.md grows past maxREADMELines.
func TestREADMEStaysShort(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > maxREADMELines {
		t.Errorf("README.md has %d lines, at most %d: move the detail into docs/", n, maxREADMELines)
	}
}

// TestDocLinksResolve checks every link of README.md, SECURITY.md and docs/*.md that points into
// the repository: the file or folder must exist and, for a link into a markdown file, the anchor
// must be one of its headings. Links to other sites are not followed.
func TestDocLinksResolve(t *testing.T) {
	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "SECURITY.md"))
	if len(pages) < 5 {
		t.Fatalf("found only %d pages: is the glob broken?", len(pages))
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(src))
		anchors[path] = a
		return a
	}
	checked := 0
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, target := range markdownLinks(string(src)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			file, anchor, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %s does not exist", rel, target, file)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %q: an anchor into a file that is not markdown", rel, target)
				continue
			}
			if !anchorsOf(dest)[anchor] {
				t.Errorf("%s: link %q: no heading with the anchor #%s", rel, target, anchor)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d links: is the parser broken?", checked)
	}
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`[^`]*`")
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// markdownLinks returns the targets of the inline links and images of a markdown text, outside
// code blocks and code spans.
func markdownLinks(src string) []string {
	var out []string
	inCode := false
	for _, line := range strings.Split(src, "\n") {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "code")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of a markdown text: lower case,
// letters, digits, '-' and '_' kept, spaces turned into '-', everything else dropped, and a
// repeated anchor numbered -1, -2, ….
func headingAnchors(src string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(src, "\n") {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		m := heading.FindStringSubmatch(line)
		if inCode || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// itoa formats a small non-negative number.
func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
