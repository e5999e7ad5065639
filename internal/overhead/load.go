package overhead

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"skywalker/internal/results"
)

// ChatBody is a chat request of about n bytes of English prose, streamed
// or not.
func ChatBody(n int, stream bool) []byte {
	words := strings.Repeat("The quick brown fox jumps over the lazy dog.\n", n/45+1)[:n]
	return []byte(fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":%q}],"max_tokens":16,"stream":%v}`,
		words, stream))
}

// Latencies sends requests at a fixed rate over conns keep-alive
// connections for d and returns each one's latency: to the whole answer,
// or to its first byte when firstByte. A request that fails is an error.
func Latencies(ctx context.Context, url string, body []byte, conns int, rate float64, d time.Duration, firstByte bool) ([]float64, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}}
	defer client.CloseIdleConnections()
	interval := time.Duration(float64(time.Second) * float64(conns) / rate) // per connection
	var mu sync.Mutex
	var out []float64
	var firstErr error
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for c := range conns {
		wg.Go(func() {
			next := time.Now().Add(time.Duration(c) * interval / time.Duration(conns)) // spread the connections
			for next.Before(stop) && ctx.Err() == nil {
				time.Sleep(time.Until(next))
				next = next.Add(interval)
				ms, err := once(ctx, client, url, body, firstByte)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil {
					out = append(out, ms)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return out, firstErr
	}
	return out, ctx.Err()
}

// once sends one request and returns its latency in µs.
func once(ctx context.Context, client *http.Client, url string, body []byte, firstByte bool) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var took time.Duration
	if firstByte {
		var b [1]byte
		_, _ = io.ReadFull(resp.Body, b[:])
		took = time.Since(start)
		_, _ = io.Copy(io.Discard, resp.Body)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
		took = time.Since(start)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return float64(took.Nanoseconds()) / 1e3, nil
}

// Throughput is a closed-loop run at its most: requests per second, and
// the gateway process's CPU per request.
type Throughput struct {
	RPS      float64
	Requests int
	CPUPerUs float64 // CPU µs of the gateway's process per request; 0 when it has none
}

var wrkRequests = regexp.MustCompile(`(\d+) requests in`)

// MaxThroughput drives url with wrk (one thread, conns connections, pinned
// to core) for d, and measures the process pid's CPU meanwhile.
func MaxThroughput(ctx context.Context, dir, url string, body []byte, conns int, d time.Duration, core, pid int) (Throughput, error) {
	bodyPath := filepath.Join(dir, "body.json")
	if err := os.WriteFile(bodyPath, body, 0o644); err != nil {
		return Throughput{}, err
	}
	script := filepath.Join(dir, "post.lua")
	lua := fmt.Sprintf("local f = io.open(%q, \"rb\")\nwrk.method = \"POST\"\nwrk.body = f:read(\"*a\")\nf:close()\nwrk.headers[\"Content-Type\"] = \"application/json\"\n", bodyPath)
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		return Throughput{}, err
	}
	cpu0 := processCPU(pid)
	argv := pinnedArgs(core, "wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(max(int(d.Seconds()), 1))+"s", "-s", script, url+"/v1/chat/completions")
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return Throughput{}, fmt.Errorf("wrk: %v: %s", err, out)
	}
	cpu := processCPU(pid) - cpu0
	m := wrkRequests.FindSubmatch(out)
	if m == nil {
		return Throughput{}, fmt.Errorf("wrk printed no request count: %s", out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	if bytes.Contains(out, []byte("Non-2xx")) {
		return Throughput{}, fmt.Errorf("wrk saw errors from %s: %s", url, out)
	}
	t := Throughput{RPS: float64(n) / d.Seconds(), Requests: n}
	if pid > 0 && n > 0 {
		t.CPUPerUs = float64(cpu.Microseconds()) / float64(n)
	}
	return t, nil
}

// processCPU is the user+system CPU time pid has used (0 for pid 0).
func processCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name (which may hold spaces) in ().
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}

// RSS is pid's resident set and its peak, in MB.
func RSS(pid int) (now, peak float64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		switch k {
		case "VmRSS":
			now = kb / 1024
		case "VmHWM":
			peak = kb / 1024
		}
	}
	return now, peak
}

// pctl is the p-th percentile of samples.
func pctl(samples []float64, p float64) float64 {
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return results.Percentile(sorted, p)
}
