package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// SignMarker signs a forwarding marker as s would when forwarding a request
// with id from origin (for tests of the receiving side).
func SignMarker(s *Server, origin, id string) string { return s.keys.sign(origin, id, time.Now()) }

// testutilValue reads a counter's value.
func testutilValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
