package layout

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// maxREADMELines bounds README.md: it is the newcomer's page, and the rest
// of the documentation lives in docs/.
const maxREADMELines = 220

var (
	fence = regexp.MustCompile("(?ms)^```[^\n]*\n.*?^```[ \t]*$")
	// mermaidBlock captures the body of a ```mermaid fenced block.
	mermaidBlock = regexp.MustCompile("(?ms)^```mermaid[ \t]*\n(.*?)^```[ \t]*$")
	codeSpan     = regexp.MustCompile("`[^`]*`")
	// link captures a Markdown link's target; its text may span lines.
	link = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// heading captures an ATX heading's text.
	heading = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
	// label captures a Mermaid node's quoted label: a["x"], b[("x")], c("x").
	label   = regexp.MustCompile(`"([^"]*)"`)
	lineBrk = regexp.MustCompile(`<br\s*/?>`)
)

// stripCode blanks fenced blocks and code spans, so that code that looks
// like a link (Go's []byte(...)) is not taken for one.
func stripCode(md string) string {
	return codeSpan.ReplaceAllString(fence.ReplaceAllString(md, ""), "")
}

// relativeLinks returns the targets of md's links that point into the
// repository: no scheme, not mailto.
func relativeLinks(md string) []string {
	var out []string
	for _, m := range link.FindAllStringSubmatch(stripCode(md), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		out = append(out, target)
	}
	return out
}

// slug is the anchor GitHub gives a heading: lower case, punctuation but
// '-' and '_' dropped, spaces turned into '-'.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of md's headings, numbering repeats as GitHub
// does (x, x-1, x-2).
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(md, ""), -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// mermaidFolders returns the parts of md's Mermaid node labels (split at
// <br/>) that end in '/': each names a folder of the repository.
func mermaidFolders(md string) []string {
	var out []string
	for _, block := range mermaidBlock.FindAllStringSubmatch(md, -1) {
		for _, m := range label.FindAllStringSubmatch(block[1], -1) {
			for _, part := range lineBrk.Split(m[1], -1) {
				if part = strings.TrimSpace(part); strings.HasSuffix(part, "/") {
					out = append(out, part)
				}
			}
		}
	}
	return out
}

// docFiles returns README.md and every docs/*.md, relative to root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "clients/ts/README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the documentation is read from the module root: %v", err)
	}
	return root
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestREADMEIsShort(t *testing.T) {
	root := repoRoot(t)
	n := strings.Count(read(t, filepath.Join(root, "README.md")), "\n")
	if n > maxREADMELines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a page in docs/", n, maxREADMELines)
	}
}

func TestRelativeLinksResolve(t *testing.T) {
	root := repoRoot(t)
	for _, file := range docFiles(t, root) {
		t.Run(file, func(t *testing.T) {
			md := read(t, filepath.Join(root, file))
			for _, target := range relativeLinks(md) {
				path, frag, _ := strings.Cut(target, "#")
				text := md
				if path != "" {
					full := filepath.Join(root, filepath.Dir(file), filepath.FromSlash(path))
					info, err := os.Stat(full)
					if err != nil {
						t.Errorf("link %q: %v", target, err)
						continue
					}
					if info.IsDir() || !strings.HasSuffix(path, ".md") {
						continue
					}
					text = read(t, full)
				}
				if frag != "" && !anchors(text)[frag] {
					t.Errorf("link %q: no heading with anchor #%s", target, frag)
				}
			}
		})
	}
}

func TestMermaidFoldersExist(t *testing.T) {
	root := repoRoot(t)
	for _, file := range docFiles(t, root) {
		t.Run(file, func(t *testing.T) {
			folders := mermaidFolders(read(t, filepath.Join(root, file)))
			if file == "README.md" && len(folders) == 0 {
				t.Error("README.md's architecture diagram names no folder (a Mermaid label ending in '/')")
			}
			for _, f := range folders {
				info, err := os.Stat(filepath.Join(root, filepath.FromSlash(f)))
				if err != nil || !info.IsDir() {
					t.Errorf("the Mermaid diagram names %q, which is not a folder of the repository", f)
				}
			}
		})
	}
}

func TestDocParsers(t *testing.T) {
	tests := []struct {
		name    string
		md      string
		links   []string
		folders []string
		anchor  string
	}{
		{
			name:  "relative links, not external ones or code",
			md:    "See [ops](docs/operations.md#runbook) and [the\nwindow](#the-dedup-window), not [Temporal](https://temporal.io) or `[]byte(x)`.\n```go\nb := []byte(s)\n```\n",
			links: []string{"docs/operations.md#runbook", "#the-dedup-window"},
		},
		{
			name:    "folder labels, split at line breaks",
			md:      "```mermaid\nflowchart LR\n    a[\"worker/<br/>bin/worker\"] -->|pull| b[\"NATS JetStream\"]\n    c[(\"store/\")]\n```\n",
			folders: []string{"worker/", "store/"},
		},
		{
			name:   "anchors as GitHub makes them",
			md:     "## `apply-points-batch`: many events in one update\n",
			anchor: "apply-points-batch-many-events-in-one-update",
		},
		{
			name:   "a repeated heading",
			md:     "## Measured\n\n## Measured\n",
			anchor: "measured-1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := relativeLinks(tt.md); fmt.Sprint(got) != fmt.Sprint(tt.links) {
				t.Errorf("relativeLinks = %q, want %q", got, tt.links)
			}
			if got := mermaidFolders(tt.md); fmt.Sprint(got) != fmt.Sprint(tt.folders) {
				t.Errorf("mermaidFolders = %q, want %q", got, tt.folders)
			}
			if tt.anchor != "" && !anchors(tt.md)[tt.anchor] {
				t.Errorf("anchors = %v, want %q among them", anchors(tt.md), tt.anchor)
			}
		})
	}
}

var (
	// currentRelease captures what a page says the current rewards release is.
	currentRelease = regexp.MustCompile(`(?i)current rewards release is (\d+)`)
	// replayFixtures captures what a page says the replay fixtures number.
	replayFixtures = regexp.MustCompile(`(\d+) replay fixtures`)
)

// The pages a newcomer meets first state the current rewards release and
// the number of replay fixtures, and every page that states them states
// what the code and workflows/testdata/manifest.json hold: raising
// RewardsRelease or recording fixtures without the docs fails here.
func TestDocsStateTheCurrentReleaseAndFixtures(t *testing.T) {
	root := repoRoot(t)
	var manifest struct {
		Fixtures []json.RawMessage `json:"fixtures"`
	}
	if err := json.Unmarshal([]byte(read(t, filepath.Join(root, "workflows", "testdata", "manifest.json"))), &manifest); err != nil {
		t.Fatal(err)
	}
	want := map[*regexp.Regexp]string{
		currentRelease: strconv.Itoa(rewards.RewardsRelease),
		replayFixtures: strconv.Itoa(len(manifest.Fixtures)),
	}
	required := map[string]bool{"README.md": true, "docs/development.md": true}
	for _, file := range docFiles(t, root) {
		md := read(t, filepath.Join(root, file))
		for re, value := range want {
			found := re.FindAllStringSubmatch(md, -1)
			if len(found) == 0 && required[file] {
				t.Errorf("%s does not say %q with %s", file, re, value)
			}
			for _, m := range found {
				if m[1] != value {
					t.Errorf("%s says %q: want %s", file, m[0], value)
				}
			}
		}
	}
}
