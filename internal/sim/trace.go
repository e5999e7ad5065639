package sim

import (
	"fmt"
	"os"

	"skywalker/internal/workload"
)

// loadTrace reads a Mooncake or Azure trace found by workload.TracePath.
func loadTrace(kind, name string) ([]workload.TraceRecord, error) {
	path, err := workload.TracePath(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	var recs []workload.TraceRecord
	if kind == "mooncake" {
		recs, err = workload.ParseMooncake(f)
	} else {
		recs, err = workload.ParseAzure(f)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}
