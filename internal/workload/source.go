package workload

import (
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"io/fs"
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

// embedded holds gzipped copies of the public traces (traces/README.md
// has their sources and licences), so every scenario runs from the binary
// alone.
//
//go:embed traces/*.gz traces/README.md
var embedded embed.FS

// EmbeddedTraces lists the traces built into the binary.
func EmbeddedTraces() []string {
	entries, _ := embedded.ReadDir("traces")
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".gz"); ok {
			out = append(out, name)
		}
	}
	return out
}

// traceSource is where a trace is read from: a file on disk, or an
// embedded copy (path "embedded:NAME").
type traceSource struct {
	path     string
	embedded bool
}

// findTrace resolves a trace by name: a path (anything with a directory,
// or an existing file) is read as it is; a bare name is looked up in
// $SKYWALKER_TRACES if that is set, else among the embedded traces. A
// trace that is not found is an error naming where it was looked for,
// never a silent substitute.
func findTrace(name string) (traceSource, error) {
	if filepath.IsAbs(name) || filepath.Dir(name) != "." {
		if _, err := os.Stat(name); err != nil {
			return traceSource{}, fmt.Errorf("trace %s: %w", name, err)
		}
		return traceSource{path: name}, nil
	}
	if dir := os.Getenv("SKYWALKER_TRACES"); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			return traceSource{}, fmt.Errorf("trace %s (SKYWALKER_TRACES=%s): %w", name, dir, err)
		}
		return traceSource{path: p}, nil
	}
	if _, err := fs.Stat(embedded, "traces/"+name+".gz"); err == nil {
		return traceSource{path: "embedded:" + name, embedded: true}, nil
	}
	if _, err := os.Stat(name); err == nil {
		return traceSource{path: name}, nil
	}
	return traceSource{}, fmt.Errorf("trace %q: not a file, and not one of the built-in traces (%s)", name, strings.Join(EmbeddedTraces(), ", "))
}

// open reads the trace, gunzipping an embedded one.
func (t traceSource) open() (io.ReadCloser, error) {
	if !t.embedded {
		f, err := os.Open(t.path)
		if err != nil {
			return nil, fmt.Errorf("open trace: %w", err)
		}
		return f, nil
	}
	f, err := embedded.Open("traces/" + strings.TrimPrefix(t.path, "embedded:") + ".gz")
	if err != nil {
		return nil, fmt.Errorf("open embedded trace: %w", err)
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded trace %s: %w", t.path, err)
	}
	return gzipFile{z, f}, nil
}

type gzipFile struct {
	*gzip.Reader
	f fs.File
}

func (g gzipFile) Close() error { g.Reader.Close(); return g.f.Close() }

// Trace formats understood by LoadTrace.
const (
	FormatMooncake = "mooncake" // JSONL with hash_ids
	FormatAzure    = "azure"    // CSV with TIMESTAMP, ContextTokens, GeneratedTokens
)

// LoadTrace finds a trace (see findTrace) and parses it. format is
// FormatMooncake or FormatAzure; empty picks by extension (.csv is Azure,
// anything else Mooncake). A trace already parsed (the same embedded
// copy, or a file of the same path, size and modification time) is not
// parsed again: an evaluation builds thousands of workloads from the same
// traces. The records are shared: callers must not modify them.
func LoadTrace(name, format string) (recs []TraceRecord, err error) {
	src, err := findTrace(name)
	if err != nil {
		return nil, err
	}
	if format == "" {
		format = FormatMooncake
		if strings.HasSuffix(src.path, ".csv") {
			format = FormatAzure
		}
	}
	key := traceKey{path: src.path, format: format}
	if !src.embedded {
		st, statErr := os.Stat(src.path)
		if statErr != nil {
			return nil, fmt.Errorf("trace %s: %w", name, statErr)
		}
		key.size, key.mod = st.Size(), st.ModTime().UnixNano()
	}
	if recs, ok := traceCache.Load(key); ok {
		return recs.([]TraceRecord), nil
	}
	r, err := src.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	switch format {
	case FormatMooncake:
		recs, err = ParseMooncake(r)
	case FormatAzure:
		recs, err = ParseAzure(r)
	default:
		return nil, fmt.Errorf("trace %s: unknown format %q", name, format)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.path, err)
	}
	traceCache.Store(key, recs)
	return recs, nil
}

// traceKey identifies one parse of one trace file.
type traceKey struct {
	path, format string
	size, mod    int64
}

// traceCache holds parsed traces by traceKey.
var traceCache sync.Map
