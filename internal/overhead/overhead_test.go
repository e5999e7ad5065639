package overhead

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestLatenciesAgainstTheUpstream: the fixed-rate client gets an answer
// for every request it sends, whole or to the first byte of a stream.
func TestLatenciesAgainstTheUpstream(t *testing.T) {
	up, err := StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	for _, stream := range []bool{false, true} {
		lat, err := Latencies(context.Background(), up.URL, ChatBody(1<<10, stream), 4, 200, 300*time.Millisecond, stream)
		if err != nil || len(lat) == 0 {
			t.Fatalf("stream %v: %d samples, %v", stream, len(lat), err)
		}
		for _, v := range lat {
			if v <= 0 {
				t.Fatalf("a latency of %v µs", v)
			}
		}
	}
}

func TestProcessAccounting(t *testing.T) {
	busy := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(busy) {
	}
	if cpu := processCPU(os.Getpid()); cpu <= 0 {
		t.Errorf("this process has used %v of CPU", cpu)
	}
	if now, peak := RSS(os.Getpid()); now <= 0 || peak < now {
		t.Errorf("RSS %v MB, peak %v MB", now, peak)
	}
	if processCPU(0) != 0 {
		t.Error("pid 0 (no process of its own) has CPU time")
	}
}

// TestTheTableComparesEachGatewayWithNginx: ratios and differences are
// to nginx's row, latencies of the upstream alone are absolute.
func TestTheTableComparesEachGatewayWithNginx(t *testing.T) {
	var b strings.Builder
	Table(&b, []Row{{Name: "direct", P50_1KB: 40, MaxRPS: 20000}, {Name: "skywalker", P50_1KB: 100, MaxRPS: 4000, CPU1KB: 200, RSSMB: 40},
		{Name: "nginx", P50_1KB: 40, MaxRPS: 8000, CPU1KB: 50, RSSMB: 10}})
	for _, want := range []string{"| upstream alone (absolute) | 40 µs", "| skywalker (added) | 100 µs", "| skywalker vs nginx | +60 µs", "0.50×", "4.00×"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestMaxThroughputMeasuresAProcess runs wrk against the upstream with
// this process's CPU counted.
func TestMaxThroughputMeasuresAProcess(t *testing.T) {
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("wrk is not installed (scripts/gateway-bench.sh installs it)")
	}
	up, err := StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	tp, err := MaxThroughput(context.Background(), t.TempDir(), up.URL, ChatBody(1<<10, false), 2, time.Second, -1, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if tp.Requests <= 0 || tp.RPS <= 0 || tp.CPUPerUs <= 0 {
		t.Errorf("throughput %+v", tp)
	}
}
