// Package scenarios embeds the built-in simulation scenarios, one YAML file
// each, so `skywalker sim --scenario NAME` works from any directory.
package scenarios

import (
	"embed"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// ErrUnknown is wrapped by Get's error for a name that is not built in.
var ErrUnknown = errors.New("no built-in scenario")

// Get returns the YAML of a built-in scenario.
func Get(name string) ([]byte, error) {
	data, err := files.ReadFile(path.Clean(name) + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("%w %q (built in: %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	return data, nil
}

// Names lists the built-in scenarios.
func Names() []string {
	entries, _ := files.ReadDir(".")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}
