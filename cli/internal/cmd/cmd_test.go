package cmd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestHelpEverywhere runs --help on every command: each has help, and it exits 0.
func TestHelpEverywhere(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, s := range c.Commands() {
			if s.Name() == "help" {
				continue
			}
			walk(s, append(append([]string{}, path...), s.Name()))
		}
	}
	walk((&App{}).rootCommand(), nil)
	if len(paths) < 30 {
		t.Fatalf("only %d commands", len(paths))
	}
	for _, p := range paths {
		var out, errb bytes.Buffer
		code := MainContext(t.Context(), append(append([]string{}, p...), "--help"), strings.NewReader(""), &out, &errb)
		if code != ExitOK || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("obsops %s --help: exit %d\n%s%s", strings.Join(p, " "), code, out.String(), errb.String())
		}
	}
}

// TestCompletion generates the completion scripts.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		var out, errb bytes.Buffer
		if code := MainContext(t.Context(), []string{"completion", sh}, strings.NewReader(""), &out, &errb); code != ExitOK || out.Len() == 0 {
			t.Errorf("completion %s: exit %d %s", sh, code, errb.String())
		}
	}
}

// TestUsageExitCodes: usage errors are exit 2, before any request.
func TestUsageExitCodes(t *testing.T) {
	for _, args := range [][]string{
		{"nosuch"}, {"token", "nosuch"}, {"token", "show"}, {"token", "show", "x"}, {"whoami", "--bogus"},
		{"program", "list", "--output", "yaml"}, {"visibility", "M42"}, {"transfer", "reset", "transfer"},
	} {
		var out, errb bytes.Buffer
		if code := MainContext(t.Context(), args, strings.NewReader(""), &out, &errb); code != ExitUsage {
			t.Errorf("obsops %v: exit %d, want %d (%s)", args, code, ExitUsage, errb.String())
		}
	}
}

// TestRender shows one answer in each format.
func TestRender(t *testing.T) {
	body := []byte(`{"items":[{"id":1,"name":"a, b","tags":["x","y"],"n":{"v":2}}],"total":1}`)
	v := view{rows: "items", columns: []string{"id", "name", "tags", "n.v"}}
	var b bytes.Buffer
	if err := render(&b, outCSV, body, v); err != nil {
		t.Fatal(err)
	}
	if b.String() != "id,name,tags,n.v\n1,\"a, b\",\"x,y\",2\n" {
		t.Fatalf("csv: %q", b.String())
	}
	b.Reset()
	if err := render(&b, outTable, body, v); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "ID  NAME  TAGS  N_V\n1   a, b  x,y   2") {
		t.Fatalf("table: %q", b.String())
	}
}
