package request

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// chatBody builds a realistic chat body of about size bytes: a system
// prompt, then alternating user/assistant turns of prose with newlines,
// quotes and the odd non-ASCII character, as JSON-escaped by a client.
func chatBody(size int) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	para := "The quick brown fox jumps over the lazy dog; \"quoted\" text, tabs\tand newlines.\nCafé prices rose 3% — see §4.\n"
	msgs := []msg{{"system", strings.Repeat("You are a careful assistant. Cite sources.\n", 40)}}
	total := 0
	for i := 0; total < size; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		c := fmt.Sprintf("Turn %d.\n%s", i, strings.Repeat(para, 40))
		msgs = append(msgs, msg{role, c})
		total += len(c) + 40
	}
	b, _ := json.Marshal(map[string]any{"model": "llama3-8b", "messages": msgs, "max_tokens": 256, "stream": true})
	return b
}

// BenchmarkParseChat400KB measures parsing + canonical rendering + block
// hashing of a ~400 KB (~100k-token) chat body. Target: <= 300 µs.
func BenchmarkParseChat400KB(b *testing.B) {
	body := chatBody(400 << 10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req, err := Parse(Chat, body, Options{})
		if err != nil || len(req.Blocks) < 700 {
			b.Fatalf("err %v blocks %d", err, len(req.Blocks))
		}
	}
}

// BenchmarkParseChat400KBPlain is the same size of plain ASCII prose, a
// newline every 45 bytes (the proxy benchmark's body): fewer stops per word.
func BenchmarkParseChat400KBPlain(b *testing.B) {
	words := strings.Repeat("The quick brown fox jumps over the lazy dog.\n", (400<<10)/45)
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": words}}})
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(Chat, body, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseChat1KB measures a small everyday request.
func BenchmarkParseChat1KB(b *testing.B) {
	body := chatBody(1 << 10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(Chat, body, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodingJSONDecode400KB is the reference the scanner is measured
// against: a full encoding/json decode of the same body, no hashing.
func BenchmarkEncodingJSONDecode400KB(b *testing.B) {
	body := chatBody(400 << 10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var v struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHashBlocks400KB is the block chain alone over a 400 KB
// rendering (XXH3 per 512-byte block, chained through a seeded XXH3 of 8
// bytes), next to the xxhash64 chain trace ids use, in one run.
func BenchmarkHashBlocks400KB(b *testing.B) {
	rendered := chatBody(400 << 10)
	b.Run("xxh3 blocks", func(b *testing.B) {
		b.SetBytes(int64(len(rendered)))
		b.ReportAllocs()
		dst := make([]uint64, 0, len(rendered)/DefaultBlockBytes)
		for b.Loop() {
			dst = HashBlocks(dst[:0], rendered, DefaultBlockBytes, DefaultSeed)
		}
	})
	b.Run("xxhash64 chain", func(b *testing.B) {
		b.SetBytes(int64(len(rendered)))
		for b.Loop() {
			parent := DefaultSeed
			for i := 0; i+DefaultBlockBytes <= len(rendered); i += DefaultBlockBytes {
				parent = chainHash(parent, DefaultSeed, rendered[i:i+DefaultBlockBytes])
			}
		}
	})
}
