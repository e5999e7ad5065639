package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// SignMarker signs a forwarding marker as a proxy of the same mesh in
// origin would when forwarding the request id with body to s (for tests of
// the receiving side).
func SignMarker(s *Server, origin, id string, body []byte) string {
	return s.markers.sign(forward{Origin: origin, Dest: s.cfg.Region, DestProxy: s.cfg.AdvertiseURL, ID: id}, body, time.Now())
}

// testutilValue reads a counter's value.
func testutilValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
