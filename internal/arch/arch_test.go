package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
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

// coreSurfaceBudget is how many exported methods the region core may
// offer its drivers, over all its types (what `go doc -all
// ./internal/region` lists): one door (region.Node) and the attempt
// handle, not façades stacked on façades.
const coreSurfaceBudget = 40

// The region core's exported surface stays within its budget, and its
// drivers reach it through Node: every exported method of an exported
// type counts (methods of unexported types are the core's own).
func TestTheCoreSurfaceStaysWithinItsBudget(t *testing.T) {
	methods := exportedMethods(t, filepath.Join("..", "region"))
	if len(methods) == 0 {
		t.Fatal("internal/region: no exported methods read: the rule checks nothing")
	}
	if len(methods) > coreSurfaceBudget {
		t.Errorf("internal/region exports %d methods, the budget is %d: %v", len(methods), coreSurfaceBudget, methods)
	}
	if !slices.Contains(methods, "Node.Submit") {
		t.Errorf("internal/region: no Node.Submit among %v: the drivers' door is gone", methods)
	}
}

// exportedMethods lists Type.Method for every exported method of an
// exported type declared in dir's non-test files.
func exportedMethods(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || !fd.Name.IsExported() {
				continue
			}
			recv := fd.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
				out = append(out, id.Name+"."+fd.Name.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}
