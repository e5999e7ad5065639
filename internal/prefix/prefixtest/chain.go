// Package prefixtest holds what tests of prefix-block code share.
package prefixtest

// Chain returns n chained block ids starting from root: prompts that share
// a root and a length share every block, as chained hashes do, and a
// prompt's blocks are a prefix of a longer one's with the same root.
func Chain(root uint64, n int) []uint64 {
	out := make([]uint64, n)
	h := root
	for i := range out {
		h = h*0x9E3779B97F4A7C15 + uint64(i) + 1
		out[i] = h
	}
	return out
}
