package explain

import (
	"embed"
	"fmt"
	"path"
	"sort"
	"strings"
)

//go:embed examples/*.yaml
var examples embed.FS

// DefaultExample is the situation `skywalker explain` shows with no file.
const DefaultExample = "worked-example"

// Example returns a built-in situation by name.
func Example(name string) ([]byte, error) {
	data, err := examples.ReadFile(path.Join("examples", name+".yaml"))
	if err != nil {
		return nil, fmt.Errorf("no built-in situation %q (built in: %s)", name, strings.Join(ExampleNames(), ", "))
	}
	return data, nil
}

// ExampleNames lists the built-in situations.
func ExampleNames() []string {
	entries, _ := examples.ReadDir("examples")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}
