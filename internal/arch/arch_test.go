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
		{"price", []string{"internal/sim", "internal/plan", "internal/proxy", "net/http"}},
		{"engine", []string{"internal/policy", "internal/proxy", "internal/sim", "internal/region"}},
		{"proxy", []string{"internal/engine", "internal/sim"}},
	}
	for _, r := range rules {
		dir := filepath.Join("..", r.pkg)
		files := 0
		for _, name := range sourceFiles(t, dir) {
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
	var out []string
	for _, name := range sourceFiles(t, dir) {
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

// The proxy's router lock is taken in router.go only, and there only by
// Router.lock, which counts it: code elsewhere reaches the core through
// Router.do. A *Router is recognised by its declared type (receivers,
// parameters, variables) or a field named router.
func TestTheRouterLockIsTakenOnlyInItsFile(t *testing.T) {
	dir := filepath.Join("..", "proxy")
	sites := 0
	for _, name := range sourceFiles(t, dir) {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			for _, site := range routerLockSites(fd) {
				sites++
				switch {
				case name != "router.go":
					t.Errorf("%s: %s takes the router's lock (%s); outside router.go use Router.do", fset.Position(site.pos), fd.Name.Name, site.call)
				case site.call == "Lock" && fd.Name.Name != "lock":
					t.Errorf("%s: %s calls mu.Lock directly; use Router.lock, which counts it", fset.Position(site.pos), fd.Name.Name)
				}
			}
		}
	}
	if sites == 0 {
		t.Error("internal/proxy: no router lock site found: the rule checks nothing")
	}
}

type lockSite struct {
	pos  token.Pos
	call string // Lock, Unlock, TryLock
}

// routerLockSites finds the calls on a Router's mu in fd.
func routerLockSites(fd *ast.FuncDecl) []lockSite {
	routers := map[string]bool{}
	isRouter := func(typ ast.Expr) bool {
		if star, ok := typ.(*ast.StarExpr); ok {
			typ = star.X
		}
		id, ok := typ.(*ast.Ident)
		return ok && id.Name == "Router"
	}
	addFields := func(fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, f := range fl.List {
			if isRouter(f.Type) {
				for _, n := range f.Names {
					routers[n.Name] = true
				}
			}
		}
	}
	addFields(fd.Recv)
	addFields(fd.Type.Params)
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && vs.Type != nil && isRouter(vs.Type) {
			for _, id := range vs.Names {
				routers[id.Name] = true
			}
		}
		return true
	})
	var out []lockSite
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "Lock" && sel.Sel.Name != "Unlock" && sel.Sel.Name != "TryLock") {
			return true
		}
		mu, ok := sel.X.(*ast.SelectorExpr)
		if !ok || mu.Sel.Name != "mu" {
			return true
		}
		switch owner := mu.X.(type) {
		case *ast.Ident:
			if routers[owner.Name] {
				out = append(out, lockSite{call.Pos(), sel.Sel.Name})
			}
		case *ast.SelectorExpr:
			if owner.Sel.Name == "router" {
				out = append(out, lockSite{call.Pos(), sel.Sel.Name})
			}
		}
		return true
	})
	return out
}

// README's layout table names every package (a directory with Go files),
// and proxy/doc.go names every file of the proxy: a newcomer finds where
// a thing lives from either.
func TestTheDocsListEveryPackageAndProxyFile(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "## Layout")
	if !ok {
		t.Fatal("README.md has no Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	listed := map[string]bool{}
	for line := range strings.SplitSeq(layout, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, part := range strings.Split(first, ",") {
			listed[strings.Trim(strings.TrimSpace(part), "`")] = true
		}
	}
	packages, seen := 0, map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != root) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		if seen[rel] {
			return nil
		}
		seen[rel] = true
		packages++
		// A package is named, or lies under a named directory outside
		// internal/ (deploy names deploy/helm); each internal package is
		// named itself.
		top, _, _ := strings.Cut(rel, "/")
		if !listed[rel] && (top == "internal" || !listed[top]) {
			t.Errorf("README.md's layout table does not name the package %s", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if packages < 20 {
		t.Errorf("only %d packages found: the rule checks nothing", packages)
	}

	doc, err := os.ReadFile(filepath.Join("..", "proxy", "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	for _, w := range strings.Fields(string(doc)) {
		if w != "//" {
			words = append(words, w)
		}
	}
	text := strings.Join(words, " ")
	files := 0
	for _, name := range sourceFiles(t, filepath.Join("..", "proxy")) {
		if name == "doc.go" {
			continue
		}
		files++
		if !strings.Contains(text, name+" (") {
			t.Errorf("internal/proxy/doc.go does not say what %s is for (want %q)", name, name+" (...)")
		}
	}
	if files == 0 {
		t.Error("internal/proxy: no files read: the rule checks nothing")
	}
}

// README's "Two commands" are exactly two — the demo and the test command
// — and .ci/run calls that same test command.
func TestTheReadmesTwoCommandsAreWhatCIRuns(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Two commands")
	if !ok {
		t.Fatal("README.md has no Two commands section")
	}
	_, block, _ := strings.Cut(section, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	var commands []string
	for line := range strings.SplitSeq(strings.TrimSpace(block), "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		commands = append(commands, strings.TrimSpace(cmd))
	}
	if len(commands) != 2 || commands[0] != "go run ./cmd/skywalker demo" {
		t.Fatalf("README's two commands are %q: want the demo, then the test command", commands)
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(ci), "\n"), commands[1]) {
		t.Errorf(".ci/run does not run the README's test command %q", commands[1])
	}
}

// sourceFiles lists the names of dir's Go files, tests left out.
func sourceFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			out = append(out, name)
		}
	}
	return out
}
