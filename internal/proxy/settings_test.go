package proxy

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
	"testing"
)

// TestEveryConfigFieldIsOneSetting: a field added to Config without a row
// in the table (or with two) fails here, and no two rows share a name.
func TestEveryConfigFieldIsOneSetting(t *testing.T) {
	rows := map[string]int{}
	envs, flags, keys := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, s := range Settings() {
		rows[s.Field]++
		for _, name := range []struct {
			seen map[string]bool
			v    string
		}{{envs, s.Env}, {flags, s.Flag}, {keys, s.Key}} {
			if name.v == "" || name.seen[name.v] {
				t.Errorf("%s: name %q is empty or used twice", s.Field, name.v)
			}
			name.seen[name.v] = true
		}
		if s.Help == "" {
			t.Errorf("%s has no help", s.Field)
		}
	}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		if f := typ.Field(i); rows[f.Name] != 1 {
			t.Errorf("Config.%s is described by %d settings, want 1", f.Name, rows[f.Name])
		}
	}
}

// sampleFor is a value for the setting other than its default, as the
// environment and as YAML write it.
func sampleFor(s Setting) (text, yaml string) {
	switch s.kind {
	case kindInt:
		return "7", "7"
	case kindBool:
		def := DefaultConfig()
		v := fmt.Sprint(!s.value(&def).(bool))
		return v, v
	case kindDuration:
		if s.Millis {
			return "150", "150ms"
		}
		return "3s", "3s"
	case kindList:
		return "a, b", "[a, b]"
	case kindPeers:
		return "eu-west:h:1", "[{region: eu-west, addr: 'h:1'}]"
	case kindRTTs:
		return "eu-west=72ms", "{eu-west: 72ms}"
	case kindAliases:
		return "public=meta-llama/Llama-3.1-8B", "{public: meta-llama/Llama-3.1-8B}"
	case kindPools:
		return "llama-8b=http://a:8000,http://b:8000;llama-70b=http://c:8000", "{llama-8b: ['http://a:8000', 'http://b:8000'], llama-70b: ['http://c:8000']}"
	}
	return "sample-value", "sample-value"
}

// TestEachSettingReadsAlikeFromEveryPlace: the environment variable and
// the YAML key fill the same field with the same value, and Format writes
// it back as Set reads it (what --help shows and a flag takes).
func TestEachSettingReadsAlikeFromEveryPlace(t *testing.T) {
	for _, s := range Settings() {
		text, yaml := sampleFor(s)
		fromEnv, fromFile, def := DefaultConfig(), DefaultConfig(), DefaultConfig()
		if err := fromEnv.ApplyEnv(env(map[string]string{s.Env: text})); err != nil {
			t.Errorf("%s=%s: %v", s.Env, text, err)
			continue
		}
		if err := fromFile.ApplyYAML([]byte(s.Key + ": " + yaml + "\n")); err != nil {
			t.Errorf("%s: %s: %v", s.Key, yaml, err)
			continue
		}
		got := s.value(&fromEnv)
		if reflect.DeepEqual(got, s.value(&def)) {
			t.Errorf("%s=%s left the default %v", s.Env, text, got)
		}
		if want := s.value(&fromFile); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the environment gives %v, the file %v", s.Field, got, want)
		}
		if !reflect.DeepEqual(fromEnv, fromFile) {
			t.Errorf("%s: the environment and the file differ beyond this field", s.Field)
		}
		again := DefaultConfig()
		if err := s.Set(&again, s.Format(&fromEnv)); err != nil || !reflect.DeepEqual(s.value(&again), got) {
			t.Errorf("%s: Format %q does not read back (%v)", s.Field, s.Format(&fromEnv), err)
		}
	}
}

// TestEveryTypedSettingRefusesNonsense names the variable for each
// setting that is not free text.
func TestEveryTypedSettingRefusesNonsense(t *testing.T) {
	for _, s := range Settings() {
		if s.kind == kindString || s.kind == kindList {
			continue
		}
		c := DefaultConfig()
		err := c.ApplyEnv(env(map[string]string{s.Env: "§"}))
		if err == nil || !strings.Contains(err.Error(), s.Env+`="§"`) {
			t.Errorf("%s=§: err = %v, want it refused by name", s.Env, err)
		}
	}
}

// FuzzSettingText: any text is read or refused, never a panic, and what
// is read writes back to the same value.
func FuzzSettingText(f *testing.F) {
	for _, seed := range []string{"7", "-1", "true", "3s", "150.5", "NaN", "1e300", "a,,b", "eu-west:h:1", "x=72ms,y=1", "a=b,=c", "eu-west=-1", "discover", "tcp://{host}:5557|tcp://{host}:5558|kv", "tcp://x|udp://y"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, s := range Settings() {
			c := DefaultConfig()
			if err := s.Set(&c, text); err != nil {
				continue
			}
			_ = c.Validate()
			again := DefaultConfig()
			if err := s.Set(&again, s.Format(&c)); err != nil || !reflect.DeepEqual(s.value(&again), s.value(&c)) {
				if s.Format(&c) != "" { // an empty list reads as "unchanged"
					t.Errorf("%s: %q read as %v, written %q, read back %v (%v)", s.Field, text, s.value(&c), s.Format(&c), s.value(&again), err)
				}
			}
		}
	})
}

// Config's comments say what a field means and nothing the settings table
// owns: no environment variable and no default (written twice, they
// drifted).
func TestConfigRestatesNoSetting(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var fields *ast.FieldList
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "Config" {
			fields = ts.Type.(*ast.StructType).Fields
		}
		return fields == nil
	})
	if fields == nil {
		t.Fatal("config.go: no Config struct")
	}
	checked := 0
	for _, fl := range fields.List {
		for _, cg := range []*ast.CommentGroup{fl.Doc, fl.Comment} {
			if cg == nil {
				continue
			}
			text := cg.Text()
			checked++
			for _, s := range Settings() {
				if s.Env != "" && strings.Contains(text, s.Env) {
					t.Errorf("Config's comment on %v names %s: the settings table owns it", fl.Names, s.Env)
				}
			}
			if strings.Contains(strings.ToLower(text), "default") {
				t.Errorf("Config's comment on %v states a default: the settings table owns it (%q)", fl.Names, strings.TrimSpace(text))
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d comments read: the rule checks nothing", checked)
	}
}
