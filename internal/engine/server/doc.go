// Package server serves the engine model over HTTP on real time, as a
// stand-in for vLLM or SGLang on machines without GPUs: the OpenAI
// completions and chat completions endpoints (streaming exactly as vLLM
// writes SSE), /v1/models, /health, and /metrics with vLLM's (or SGLang's)
// metric names. Optional fault injection lets tests exercise retries and
// failover against a real process.
//
// One goroutine runs the engine loop: it forms a batch, sleeps the step's
// model time divided by the time scale, and applies the step; handlers
// only add sequences and wait for their tokens. The engine itself stays
// pure; every call into it holds the server's mutex.
package server
