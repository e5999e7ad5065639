package workload

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"skywalker/internal/request"
)

// Arrival is one request arriving at a region at an offset from the start.
type Arrival struct {
	At      time.Duration
	Region  string
	Request *request.Request
}

// Source yields arrivals in non-decreasing time order. Next returns false
// when the source is exhausted. Sources are not safe for concurrent use.
type Source interface {
	Next() (Arrival, bool)
}

// SliceSource replays a fixed list of arrivals.
type SliceSource struct {
	arrivals []Arrival
	next     int
}

// NewSliceSource returns a source over arrivals, which must be sorted.
func NewSliceSource(arrivals []Arrival) *SliceSource { return &SliceSource{arrivals: arrivals} }

// Next implements Source.
func (s *SliceSource) Next() (Arrival, bool) {
	if s.next >= len(s.arrivals) {
		return Arrival{}, false
	}
	a := s.arrivals[s.next]
	s.next++
	return a, true
}

// Limit stops src after n arrivals (n <= 0: no limit).
func Limit(src Source, n int) Source {
	if n <= 0 {
		return src
	}
	return &limitSource{src: src, left: n}
}

type limitSource struct {
	src  Source
	left int
}

func (l *limitSource) Next() (Arrival, bool) {
	if l.left <= 0 {
		return Arrival{}, false
	}
	l.left--
	return l.src.Next()
}

// ErrNoTraces is returned when the shared traces directory cannot be found.
var ErrNoTraces = errors.New("trace directory not found (set SKYWALKER_TRACES to the folder holding the traces)")

// TracePath finds a trace file by name: in $SKYWALKER_TRACES if set, else
// in ../shared/traces beside the repository (found by walking up from the
// working directory to the folder holding go.mod).
func TracePath(name string) (string, error) {
	if filepath.IsAbs(name) || filepath.Dir(name) != "." {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("trace %s: %w", name, err)
		}
		return name, nil
	}
	if dir := os.Getenv("SKYWALKER_TRACES"); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("trace %s: %w", name, err)
		}
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find trace %s: %w", name, err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "..", "shared", "traces", name)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("trace %s: %w", name, ErrNoTraces)
		}
		dir = parent
	}
}

// Trace formats understood by LoadTrace.
const (
	FormatMooncake = "mooncake" // JSONL with hash_ids
	FormatAzure    = "azure"    // CSV with TIMESTAMP, ContextTokens, GeneratedTokens
)

// LoadTrace finds a trace with TracePath and parses it. format is
// FormatMooncake or FormatAzure; empty picks by extension (.csv is Azure,
// anything else Mooncake). A file already parsed (same path, size and
// modification time) is not parsed again: an evaluation builds thousands
// of workloads from the same traces. The records are shared: callers must
// not modify them.
func LoadTrace(name, format string) (recs []TraceRecord, err error) {
	path, err := TracePath(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	if format == "" {
		format = FormatMooncake
		if strings.HasSuffix(path, ".csv") {
			format = FormatAzure
		}
	}
	key := traceKey{path: path, format: format}
	if st, statErr := f.Stat(); statErr == nil {
		key.size, key.mod = st.Size(), st.ModTime().UnixNano()
		if recs, ok := traceCache.Load(key); ok {
			return recs.([]TraceRecord), nil
		}
		defer func() {
			if err == nil {
				traceCache.Store(key, recs)
			}
		}()
	}
	switch format {
	case FormatMooncake:
		recs, err = ParseMooncake(f)
	case FormatAzure:
		recs, err = ParseAzure(f)
	default:
		return nil, fmt.Errorf("trace %s: unknown format %q", name, format)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}

// traceKey identifies one parse of one trace file.
type traceKey struct {
	path, format string
	size, mod    int64
}

// traceCache holds parsed traces by traceKey.
var traceCache sync.Map
