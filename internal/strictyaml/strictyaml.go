// Package strictyaml decodes the YAML files users write (scenarios,
// situations, demand, proxy configuration) strictly — an unknown key or a
// value of the wrong kind is an error — and words its errors for the
// person who wrote the file: "line 3: unknown field \"bogus\"", never the
// Go type it was decoded into.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrEmpty is returned for a file with no YAML document.
var ErrEmpty = errors.New("the file is empty")

// Decode decodes data into v strictly. A file holding nothing is ErrEmpty.
func Decode(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		return ErrEmpty
	}
	if err != nil {
		return humanize(err)
	}
	return nil
}

var (
	unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)
	wrongKind    = regexp.MustCompile("cannot unmarshal !!(\\w+) `([^`]*)` into (.+)$")
	wrongKindAny = regexp.MustCompile(`cannot unmarshal !!(\w+) into (.+)$`)
)

// humanize rewrites yaml.v3's messages without Go type names.
func humanize(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	lines := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		e = unknownField.ReplaceAllString(e, `unknown field "$1"`)
		e = wrongKind.ReplaceAllStringFunc(e, func(m string) string {
			g := wrongKind.FindStringSubmatch(m)
			return fmt.Sprintf("%q is %s, want %s", g[2], yamlKind(g[1]), goKind(g[3]))
		})
		e = wrongKindAny.ReplaceAllStringFunc(e, func(m string) string {
			g := wrongKindAny.FindStringSubmatch(m)
			return fmt.Sprintf("found %s, want %s", yamlKind(g[1]), goKind(g[2]))
		})
		lines[i] = e
	}
	return errors.New(strings.Join(lines, "; "))
}

func yamlKind(tag string) string {
	switch tag {
	case "str":
		return "text"
	case "int", "float":
		return "a number"
	case "bool":
		return "true or false"
	case "seq":
		return "a list"
	case "map":
		return "a mapping"
	default:
		return tag
	}
}

func goKind(t string) string {
	switch {
	case t == "time.Duration":
		return "a duration such as 250ms or 2s"
	case strings.HasPrefix(t, "uint"):
		return "a whole number, 0 or more"
	case strings.HasPrefix(t, "int"):
		return "a whole number"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "text"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "a mapping"
	default:
		return "a mapping" // a struct
	}
}
