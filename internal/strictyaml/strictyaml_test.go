package strictyaml

import (
	"errors"
	"strings"
	"testing"
	"time"
)

type doc struct {
	Name    string        `yaml:"name"`
	Count   int           `yaml:"count"`
	Share   float64       `yaml:"share"`
	Wait    time.Duration `yaml:"wait"`
	Regions []struct {
		Name string `yaml:"name"`
	} `yaml:"regions"`
}

func TestErrorsNameTheFieldNotTheGoType(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"bogus: 1", `line 1: unknown field "bogus"`},
		{"count: many", `line 1: "many" is text, want a whole number`},
		{"share: [1]", "line 1: found a list, want a number"},
		{"wait: soon", `line 1: "soon" is text, want a duration such as 250ms or 2s`},
		{"regions: {a: 1}", "line 1: found a mapping, want a list"},
		{"regions: [3]", `line 1: "3" is a number, want a mapping`},
		{"name: x\nbogus: 1\ncount: x", `line 2: unknown field "bogus"; line 3: "x" is text, want a whole number`},
	}
	for _, tt := range tests {
		var d doc
		err := Decode([]byte(tt.in), &d)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Decode(%q) = %v, want %q", tt.in, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), "strictyaml.") || strings.Contains(err.Error(), "time.Duration")) {
			t.Errorf("Decode(%q): %v leaks a Go type", tt.in, err)
		}
	}
	var d doc
	if err := Decode([]byte(""), &d); !errors.Is(err, ErrEmpty) {
		t.Errorf("empty: %v, want ErrEmpty", err)
	}
	if err := Decode([]byte("name: a\nwait: 2s\nregions: [{name: r}]"), &d); err != nil || d.Wait != 2*time.Second || d.Regions[0].Name != "r" {
		t.Errorf("a good file: %v, %+v", err, d)
	}
	if err := Decode([]byte("name: [unclosed"), &d); err == nil {
		t.Error("a syntax error must be an error")
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{"bogus: 1", "count: many", "regions: [3]", "name: x\nwait: 2s", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d doc
		_ = Decode([]byte(s), &d) // must not panic
	})
}
