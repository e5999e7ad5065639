package request

import (
	"slices"
	"testing"
)

// Two models, or two adapters of one, never share a block; setting the
// pool again re-salts (it does not salt twice); a fleet of one unnamed
// model keeps its blocks as hashed.
func TestThePoolSaltsTheBlocks(t *testing.T) {
	blocks := func(base, adapter string) []uint64 {
		r := &Request{Blocks: []uint64{1, 2, 3}}
		r.SetPool(base, adapter)
		return r.Blocks
	}
	if got := blocks("", ""); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("no model: blocks %v, want them unsalted", got)
	}
	a, b, c := blocks("llama-8b", ""), blocks("llama-70b", ""), blocks("llama-8b", "sql-lora")
	for i := range a {
		if a[i] == b[i] || a[i] == c[i] || b[i] == c[i] {
			t.Errorf("block %d shared between pools: %x %x %x", i, a[i], b[i], c[i])
		}
	}
	r := &Request{Blocks: []uint64{1, 2, 3}}
	r.SetPool("llama-70b", "")
	r.SetPool("llama-8b", "sql-lora")
	if !slices.Equal(r.Blocks, c) || r.Base != "llama-8b" || r.Adapter != "sql-lora" {
		t.Errorf("set twice: %v %q %q, want %v llama-8b sql-lora", r.Blocks, r.Base, r.Adapter, c)
	}
}
