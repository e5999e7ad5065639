package proxy

import "time"

// SignMarker signs a forwarding marker as s would when forwarding a request
// with id from origin (for tests of the receiving side).
func SignMarker(s *Server, origin, id string) string { return s.keys.sign(origin, id, time.Now()) }
