package arch

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The decision core and the region core are pure: they import neither the
// engine model, nor either driver, nor the network. The engine model does
// not build routing configuration, and the proxy does not run the engine
// model. Profiles (internal/profile) are what they share.
func TestTheCoreImportsNoDriverAndNoEngine(t *testing.T) {
	rules := []struct {
		pkg       string
		forbidden []string
	}{
		{"policy", []string{"internal/engine", "internal/proxy", "internal/sim", "internal/mesh", "net/http"}},
		{"balancer", []string{"internal/engine", "internal/proxy", "internal/sim", "internal/mesh", "net/http"}},
		{"region", []string{"internal/engine", "internal/proxy", "internal/sim", "internal/mesh", "net/http"}},
		{"prefix", []string{"internal/engine", "internal/proxy", "internal/sim", "net/http"}},
		{"digest", []string{"internal/engine", "internal/proxy", "internal/sim", "net/http"}},
		{"profile", []string{"skywalker/"}},
		{"engine", []string{"internal/policy", "internal/proxy", "internal/sim", "internal/region"}},
		{"proxy", []string{"internal/engine", "internal/sim"}},
	}
	for _, r := range rules {
		dir := filepath.Join("..", r.pkg)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("%s: %v", r.pkg, err)
		}
		files := 0
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("%s/%s: %v", r.pkg, name, err)
			}
			files++
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, bad := range r.forbidden {
					if strings.Contains(path, bad) {
						t.Errorf("internal/%s/%s imports %s: the %s package must not depend on %s", r.pkg, name, path, r.pkg, bad)
					}
				}
			}
		}
		if files == 0 {
			t.Errorf("internal/%s: no source files read: the rule checks nothing", r.pkg)
		}
	}
}
