package server_test

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/request"
)

func asError[T error](err error, target *T) bool { return errors.As(err, target) }

// agreementCase is one request of the agreement workload.
type agreementCase struct {
	at     time.Duration // model-time arrival
	prompt string
	out    int
}

func agreementWorkload() []agreementCase {
	var cases []agreementCase
	for i := range 30 {
		// Three tenants' shared system prompts, then a per-request question;
		// lengths from ~1k to ~3k tokens, arrivals every 700 ms (model time)
		// with bursts, so queueing and prefix reuse both show.
		system := strings.Repeat(fmt.Sprintf("tenant %d policy text. ", i%3), 150+100*(i%3))
		question := strings.Repeat(fmt.Sprintf("question %d. ", i), 20+10*(i%5))
		at := time.Duration(i/3) * 2100 * time.Millisecond
		cases = append(cases, agreementCase{at: at + time.Duration(i%3)*50*time.Millisecond, prompt: system + question, out: 16 + i%4*8})
	}
	return cases
}

func body(c agreementCase) string {
	return fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}],"max_tokens":%d,"stream":true}`, c.prompt, c.out)
}

// TestHTTPDriverAgreesWithVirtualTime sends the same request sequence to
// the HTTP server (at 5× real time) and to the model on virtual time, and
// checks that per-request TTFT agrees within 10% at p50 and p90.
func TestHTTPDriverAgreesWithVirtualTime(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time test")
	}
	const scale = 5.0
	p, _ := engine.LookupProfile("llama3-8b-l4")
	cases := agreementWorkload()

	// Virtual driver.
	e := engine.New(engine.Config{Profile: p})
	var arrivals []engine.Arrival
	var seqs []*engine.Sequence
	for i, c := range cases {
		req, err := request.Parse(request.Chat, []byte(body(c)), request.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s := &engine.Sequence{ID: fmt.Sprint(i), PromptTokens: req.PromptTokens, MaxTokens: c.out, Units: req.Blocks, UnitTokens: req.BlockTokens}
		seqs = append(seqs, s)
		arrivals = append(arrivals, engine.Arrival{At: c.at, Seq: s})
	}
	if _, err := engine.RunVirtual(e, time.Unix(0, 0), arrivals, nil); err != nil {
		t.Fatal(err)
	}
	virtual := make([]time.Duration, len(seqs))
	for i, s := range seqs {
		virtual[i] = s.FirstTokenAt.Sub(s.Arrival)
	}

	// HTTP driver.
	_, url := server.StartForTest(t, p.Name, server.Config{Model: "m", TimeScale: scale})
	live := make([]time.Duration, len(cases))
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	begin := time.Now()
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(begin.Add(time.Duration(float64(c.at) / scale))))
			sent := time.Now()
			resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body(c)))
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if strings.Contains(sc.Text(), `"content":"`) && !strings.Contains(sc.Text(), `"content":""`) {
					live[i] = time.Duration(float64(time.Since(sent)) * scale)
					break
				}
			}
			for sc.Scan() {
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []float64{0.5, 0.9} {
		v, l := quantile(virtual, q), quantile(live, q)
		diff := float64(l-v) / float64(v)
		t.Logf("TTFT p%.0f: virtual %v, HTTP %v (%+.1f%%)", q*100, v.Round(time.Millisecond), l.Round(time.Millisecond), diff*100)
		if diff > 0.10 || diff < -0.10 {
			t.Errorf("p%.0f TTFT differs by %.1f%%, want within 10%%", q*100, diff*100)
		}
	}
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}
