package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"skywalker/internal/node"
	"skywalker/internal/proxy"
)

// responsesClients are the official OpenAI client at each region's proxy.
func responsesClients(c *node.Cluster) map[string]openai.Client {
	out := map[string]openai.Client{}
	for _, r := range c.Regions {
		out[r.Region] = openai.NewClient(option.WithBaseURL(r.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
			option.WithHeader(proxy.GatewayTenantHeader, "tenant-a"))
	}
	return out
}

// servedAt is where a response was served: region/replica.
func servedAt(raw *http.Response) string {
	return raw.Header.Get("X-SkyWalker-Region") + "/" + raw.Header.Get("X-SkyWalker-Replica")
}

// turn sends one turn of a chain (streamed or not) to client and returns
// the response id and where it was served.
func turn(ctx context.Context, client openai.Client, previous, input string, stream bool) (id, at string, err error) {
	params := responses.ResponseNewParams{Model: "m", MaxOutputTokens: openai.Int(6),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)}}
	if previous != "" {
		params.PreviousResponseID = openai.String(previous)
	}
	var raw *http.Response
	if !stream {
		resp, err := client.Responses.New(ctx, params, option.WithResponseInto(&raw))
		if err != nil {
			return "", "", err
		}
		if resp.OutputText() == "" {
			return "", "", fmt.Errorf("response %s has no text", resp.ID)
		}
		return resp.ID, servedAt(raw), nil
	}
	s := client.Responses.NewStreaming(ctx, params, option.WithResponseInto(&raw))
	var text strings.Builder
	for s.Next() {
		ev := s.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed", "response.incomplete":
			id = ev.Response.ID
		}
	}
	if err := s.Err(); err != nil {
		return "", "", err
	}
	if id == "" || text.Len() == 0 {
		return "", "", fmt.Errorf("stream ended without its response (id %q, text %q)", id, text.String())
	}
	return id, servedAt(raw), nil
}

// TestResponsesChainsLandHomeFromAnyRegion: chains of five turns through
// a three-region mesh, each turn entering at a random region, streamed
// and not: every turn is served by the replica that holds the chain (no
// chain breaks), the ids name their home and GET reads them from any
// region. A proxy restarted mid-chain loses none. Once the home replica
// is killed, the next turn is told at once that the previous response
// is gone; an unknown id, another tenant's, and a malformed input are
// clear 4xx.
func TestResponsesChainsLandHomeFromAnyRegion(t *testing.T) {
	c := startCluster(t, clusterOpts{responses: true})
	clients := responsesClients(c)
	regions := []string{"us-east", "eu-west", "ap-east"}
	rng := rand.New(rand.NewPCG(7, 29))
	ctx := context.Background()
	type chain struct {
		last, home string
	}
	chains := make([]chain, 4)
	for step := range 5 {
		if step == 2 {
			// A proxy restarts mid-chain: what it knew of the chains was
			// nothing but what their ids say.
			if err := c.RestartProxy(ctx, "eu-west"); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			if err := c.WaitConverged(ctx, 60*time.Second); err != nil {
				t.Fatal(err)
			}
			clients = responsesClients(c)
			t.Logf("the restarted proxy rejoined in %v", time.Since(restarted).Round(time.Millisecond))
		}
		for i := range chains {
			ingress := regions[rng.IntN(len(regions))]
			id, at, err := turn(ctx, clients[ingress], chains[i].last, fmt.Sprintf("chain %d, turn %d: tell me more.", i, step), (i+step)%2 == 0)
			if err != nil {
				t.Fatalf("chain %d turn %d entering at %s: %v", i, step, ingress, err)
			}
			if !strings.HasPrefix(id, "resp_sw") {
				t.Errorf("chain %d turn %d: id %q does not name its home", i, step, id)
			}
			if step == 0 {
				chains[i].home = at
			} else if at != chains[i].home {
				t.Errorf("chain %d turn %d entering at %s was served by %s, its chain lives on %s: broken", i, step, ingress, at, chains[i].home)
			}
			chains[i].last = id
		}
	}
	for i, ch := range chains {
		cl := clients[regions[i%3]]
		got, err := cl.Responses.Get(ctx, ch.last, responses.ResponseGetParams{})
		if err != nil || got.ID != ch.last || got.OutputText() == "" {
			t.Errorf("GET chain %d's last response from %s: %+v, %v", i, regions[i%3], got, err)
		}
	}

	// Its events again, streamed from another region, and a background
	// response cancelled from a region other than the one it began in.
	us, ap := clients["us-east"], clients["ap-east"]
	replay := us.Responses.GetStreaming(ctx, chains[1].last, responses.ResponseGetParams{})
	var replayed string
	for replay.Next() {
		if ev := replay.Current(); ev.Type == "response.completed" || ev.Type == "response.incomplete" {
			replayed = ev.Response.ID
		}
	}
	if err := replay.Err(); err != nil || replayed != chains[1].last {
		t.Errorf("streamed GET: %q, %v; want the events of %s", replayed, err, chains[1].last)
	}
	bg, err := ap.Responses.New(ctx, responses.ResponseNewParams{Model: "m", Background: openai.Bool(true), MaxOutputTokens: openai.Int(100000),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("a very long story")}})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := us.Responses.Cancel(ctx, bg.ID)
	if err != nil || cancelled.Status != "cancelled" || cancelled.ID != bg.ID {
		t.Errorf("cancel %s through us-east: %+v, %v", bg.ID, cancelled, err)
	}

	var apiErr *openai.Error
	other := openai.NewClient(option.WithBaseURL(c.Region("us-east").URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
		option.WithHeader(proxy.GatewayTenantHeader, "tenant-b"))
	_, _, err = turn(ctx, other, chains[0].last, "not yours", false)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "previous_response_not_found" {
		t.Errorf("another tenant's previous_response_id: %v, want a 400 previous_response_not_found", err)
	}
	if _, err := other.Responses.Get(ctx, chains[0].last, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Errorf("GET another tenant's response: %v, want 404", err)
	}
	for _, bad := range []string{"resp_0123456789abcdef", "resp_swAAAA"} {
		_, _, err := turn(ctx, clients["us-east"], bad, "hi", false)
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "previous_response_not_found" {
			t.Errorf("previous_response_id %q: %v, want a 400 previous_response_not_found", bad, err)
		}
	}
	resp, err := http.Post(c.Region("us-east").URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","input":[{"content":"no role"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("a malformed input: %d, want 400", resp.StatusCode)
	}

	// The home replica of chain 0 dies: its next turn, from anywhere, is
	// told at once that the previous response is gone.
	homeRegion, homeReplica, _ := strings.Cut(chains[0].home, "/")
	for _, e := range c.Region(homeRegion).Engines {
		if strings.TrimPrefix(e.URL, "http://") == homeReplica {
			e.Kill()
		}
	}
	start := time.Now()
	_, _, err = turn(ctx, clients[regions[(rng.IntN(3))]], chains[0].last, "are you there?", false)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "previous_response_not_found" || !strings.Contains(apiErr.Message, "no longer available") {
		t.Errorf("after the home replica died: %v, want a 400 previous_response_not_found saying it is no longer available", err)
	}
	took := time.Since(start)
	t.Logf("the dead home was reported after %v", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the dead home was reported after %v: not at once", took)
	}
}
