// Package workload makes the request streams the simulator (and the live
// load generator) replay: a multi-region diurnal generator with multi-turn
// sessions and shared tenant prompts, and loaders for real traces
// (Mooncake JSONL with prefix block ids, Azure CSV with lengths and arrival
// times), of which the public ones are embedded (traces/, with their
// licences) so every scenario runs from the binary alone.
//
// Every source yields requests in arrival order and is deterministic for a
// seed. Trace parsers reject malformed input with an error that names the
// line and never panic (fuzz targets in this package).
package workload
