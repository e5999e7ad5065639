package workload

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseMooncake(t *testing.T) {
	in := `{"timestamp": 1000, "input_length": 1200, "output_length": 5, "hash_ids": [0, 1, 2]}
{"timestamp": 1500, "input_length": 600, "output_length": 0, "hash_ids": [0, 3]}
`
	recs, err := ParseMooncake(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[1].At != 500*time.Millisecond || recs[0].InputTokens != 1200 || len(recs[0].BlockIDs) != 3 {
		t.Errorf("records %+v", recs)
	}
	if recs[1].OutputTokens != 1 {
		t.Error("a zero output length is raised to one token")
	}
}

func TestParseMooncakeRejectsBadLines(t *testing.T) {
	tests := map[string]string{
		"not json":          "hello\n",
		"missing field":     `{"timestamp": 1, "input_length": 5}` + "\n",
		"negative length":   `{"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": []}` + "\n",
		"wrong type":        `{"timestamp": "now", "input_length": 5, "output_length": 1}` + "\n",
		"time goes back":    `{"timestamp": 10, "input_length": 5, "output_length": 1}` + "\n" + `{"timestamp": 5, "input_length": 5, "output_length": 1}` + "\n",
		"trailing data":     `{"timestamp": 1, "input_length": 5, "output_length": 1} {}` + "\n",
		"empty":             "",
		"negative hash ids": `{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [-1]}` + "\n",
	}
	for name, in := range tests {
		if _, err := ParseMooncake(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseAzure(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4808,10\n2023-11-16 18:15:47.1805900,100,0\n"
	recs, err := ParseAzure(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[1].At != 500*time.Millisecond || recs[0].InputTokens != 4808 || recs[1].OutputTokens != 1 {
		t.Errorf("records %+v", recs)
	}
}

func TestParseAzureRejectsBadRows(t *testing.T) {
	tests := map[string]string{
		"no header columns": "a,b,c\n1,2,3\n",
		"bad time":          "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n",
		"bad count":         "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,x,1\n",
		"zero context":      "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,0,1\n",
		"short row":         "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1\n",
		"no rows":           "TIMESTAMP,ContextTokens,GeneratedTokens\n",
		"empty":             "",
	}
	for name, in := range tests {
		if _, err := ParseAzure(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestTheEmbeddedTracesAreTheWholeTraces: the traces built into the
// binary parse to their published row counts (README), with no files
// beside it; a name that is neither a file nor built in is an error that
// names the built-in ones; SKYWALKER_TRACES, when set, is where names are
// looked up.
func TestTheEmbeddedTracesAreTheWholeTraces(t *testing.T) {
	t.Chdir(t.TempDir()) // nothing beside us
	for _, tc := range []struct {
		name string
		rows int
	}{{"mooncake_conversation.jsonl", 12031}, {"azure_conv_2023.csv", 19366}, {"azure_code_2023.csv", 8819}} {
		recs, err := LoadTrace(tc.name, "")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		// The CSVs hold a header line; the row counts in the README count lines.
		if len(recs) != tc.rows && len(recs) != tc.rows-1 {
			t.Errorf("%s: %d records, want about %d", tc.name, len(recs), tc.rows)
		}
	}
	if _, err := LoadTrace("nowhere.jsonl", ""); err == nil || !strings.Contains(err.Error(), "azure_conv_2023.csv") {
		t.Errorf("a missing trace: %v; want an error naming the built-in traces", err)
	}
	dir := t.TempDir()
	_ = os.WriteFile(dir+"/azure_conv_2023.csv", []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,2\n"), 0o644)
	t.Setenv("SKYWALKER_TRACES", dir)
	if recs, err := LoadTrace("azure_conv_2023.csv", ""); err != nil || len(recs) != 1 {
		t.Errorf("with SKYWALKER_TRACES: %d records, %v; want the folder's one-row file", len(recs), err)
	}
}

func FuzzParseMooncake(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0, 1]}` + "\n"))
	f.Add([]byte("{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := ParseMooncake(strings.NewReader(string(data)))
		if err == nil && len(recs) == 0 {
			t.Fatal("no error and no records")
		}
		for _, r := range recs {
			if r.InputTokens < 1 || r.OutputTokens < 1 || r.At < 0 {
				t.Fatalf("invalid record accepted: %+v", r)
			}
		}
	})
}

func FuzzParseAzure(f *testing.F) {
	f.Add([]byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4808,10\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := ParseAzure(strings.NewReader(string(data)))
		if err == nil && len(recs) == 0 {
			t.Fatal("no error and no records")
		}
		for _, r := range recs {
			if r.InputTokens < 1 || r.OutputTokens < 1 || r.At < 0 {
				t.Fatalf("invalid record accepted: %+v", r)
			}
		}
	})
}

func TestReplayKeepsSessionsInOneRegion(t *testing.T) {
	recs := []TraceRecord{
		{At: 0, InputTokens: 1000, OutputTokens: 5, BlockIDs: []uint64{0, 7, 8}},
		{At: time.Second, InputTokens: 1500, OutputTokens: 5, BlockIDs: []uint64{0, 7, 8, 9}},
		{At: 2 * time.Second, InputTokens: 700, OutputTokens: 5, BlockIDs: []uint64{0, 11}},
	}
	src, err := Replay{Records: recs, Regions: []RegionLoad{{Name: "a"}, {Name: "b"}, {Name: "c"}}, Speedup: 2}.Source()
	if err != nil {
		t.Fatal(err)
	}
	var got []Arrival
	for a, ok := src.Next(); ok; a, ok = src.Next() {
		got = append(got, a)
	}
	if len(got) != 3 || got[0].Region != got[1].Region {
		t.Fatalf("a conversation's turns were split: %+v", got)
	}
	if got[1].At != 500*time.Millisecond {
		t.Errorf("speedup 2 should halve offsets: %v", got[1].At)
	}
	if got[0].Request.Blocks[1] != got[1].Request.Blocks[1] || got[1].Request.BlockTokens != MooncakeBlockTokens {
		t.Error("shared ids must give shared block hashes")
	}
}

func TestLoadTracePicksTheParser(t *testing.T) {
	dir := t.TempDir()
	csv := dir + "/t.csv"
	jsonl := dir + "/t.jsonl"
	_ = os.WriteFile(csv, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,2\n"), 0o644)
	_ = os.WriteFile(jsonl, []byte(`{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}`+"\n"), 0o644)
	for _, path := range []string{csv, jsonl} {
		if recs, err := LoadTrace(path, ""); err != nil || len(recs) != 1 {
			t.Errorf("%s: %v %v", path, recs, err)
		}
	}
	if _, err := LoadTrace(csv, FormatMooncake); err == nil {
		t.Error("a CSV read as Mooncake must fail")
	}
	if _, err := LoadTrace(csv, "parquet"); err == nil {
		t.Error("an unknown format must fail")
	}
}
