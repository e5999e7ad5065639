package workload

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// TraceRecord is one request of a trace.
type TraceRecord struct {
	At           time.Duration // offset from the trace's first request
	InputTokens  int
	OutputTokens int
	BlockIDs     []uint64 // prefix block ids (Mooncake); nil when the trace has none
}

// Bounds on trace values; anything outside is a malformed record.
const (
	maxTraceTokens = 10_000_000
	maxTraceBlocks = 100_000
	maxLineBytes   = 8 << 20
)

// MooncakeBlockTokens is the tokens per hash id in the Mooncake traces.
const MooncakeBlockTokens = 512

// ParseMooncake reads the Mooncake JSONL trace format: one object per line
// with timestamp (ms), input_length, output_length and hash_ids.
func ParseMooncake(r io.Reader) ([]TraceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	var out []TraceRecord
	var first int64
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var rec struct {
			Timestamp    *int64   `json:"timestamp"`
			InputLength  *int     `json:"input_length"`
			OutputLength *int     `json:"output_length"`
			HashIDs      []uint64 `json:"hash_ids"`
		}
		dec := json.NewDecoder(bytes.NewReader(text))
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("mooncake trace line %d: %w", line, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("mooncake trace line %d: data after the JSON object", line)
		}
		switch {
		case rec.Timestamp == nil || rec.InputLength == nil || rec.OutputLength == nil:
			return nil, fmt.Errorf("mooncake trace line %d: timestamp, input_length and output_length are required", line)
		case *rec.Timestamp < 0 || *rec.Timestamp > int64(365*24*time.Hour/time.Millisecond):
			return nil, fmt.Errorf("mooncake trace line %d: timestamp %d ms out of range", line, *rec.Timestamp)
		case *rec.InputLength < 1 || *rec.InputLength > maxTraceTokens || *rec.OutputLength < 0 || *rec.OutputLength > maxTraceTokens:
			return nil, fmt.Errorf("mooncake trace line %d: lengths %d/%d out of range", line, *rec.InputLength, *rec.OutputLength)
		case len(rec.HashIDs) > maxTraceBlocks:
			return nil, fmt.Errorf("mooncake trace line %d: %d hash ids, more than %d", line, len(rec.HashIDs), maxTraceBlocks)
		}
		if len(out) == 0 {
			first = *rec.Timestamp
		}
		if *rec.Timestamp < first {
			return nil, fmt.Errorf("mooncake trace line %d: timestamp %d goes back before the first record", line, *rec.Timestamp)
		}
		out = append(out, TraceRecord{
			At: time.Duration(*rec.Timestamp-first) * time.Millisecond, InputTokens: *rec.InputLength,
			OutputTokens: max(*rec.OutputLength, 1), BlockIDs: rec.HashIDs,
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mooncake trace: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("mooncake trace has no records")
	}
	return out, nil
}

// azureTimeLayout is the Azure trace's TIMESTAMP format (7 fractional digits).
const azureTimeLayout = "2006-01-02 15:04:05.9999999"

// ParseAzure reads the Azure LLM inference trace CSV format: a header with
// TIMESTAMP, ContextTokens and GeneratedTokens, then one request per row.
func ParseAzure(r io.Reader) ([]TraceRecord, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("azure trace header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	ts, okT := col["TIMESTAMP"]
	ctx, okC := col["ContextTokens"]
	gen, okG := col["GeneratedTokens"]
	if !okT || !okC || !okG {
		return nil, fmt.Errorf("azure trace header %q: want TIMESTAMP, ContextTokens, GeneratedTokens", strings.Join(header, ","))
	}
	var out []TraceRecord
	var first time.Time
	for line := 2; ; line++ {
		row, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("azure trace line %d: %w", line, err)
		}
		if len(row) != len(header) {
			return nil, fmt.Errorf("azure trace line %d: %d fields, want %d", line, len(row), len(header))
		}
		at, err := time.Parse(azureTimeLayout, strings.TrimSpace(row[ts]))
		if err != nil {
			return nil, fmt.Errorf("azure trace line %d: TIMESTAMP: %w", line, err)
		}
		in, err1 := strconv.Atoi(strings.TrimSpace(row[ctx]))
		outTok, err2 := strconv.Atoi(strings.TrimSpace(row[gen]))
		if err1 != nil || err2 != nil || in < 1 || in > maxTraceTokens || outTok < 0 || outTok > maxTraceTokens {
			return nil, fmt.Errorf("azure trace line %d: token counts %q/%q must be integers in range", line, row[ctx], row[gen])
		}
		if len(out) == 0 {
			first = at
		}
		offset := at.Sub(first)
		if offset < 0 {
			return nil, fmt.Errorf("azure trace line %d: TIMESTAMP goes back before the first record", line)
		}
		out = append(out, TraceRecord{At: offset, InputTokens: in, OutputTokens: max(outTok, 1)})
	}
	if len(out) == 0 {
		return nil, errors.New("azure trace has no records")
	}
	return out, nil
}
