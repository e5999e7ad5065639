package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
		a, err := respond(ctx, client, params)
		return a.id, a.at, err
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

// answer is a Responses answer as the test reads it.
type answer struct {
	id, at, text string
	chain        string // X-SkyWalker-Chain
}

// respond sends params, unstreamed.
func respond(ctx context.Context, client openai.Client, params responses.ResponseNewParams) (answer, error) {
	var raw *http.Response
	resp, err := client.Responses.New(ctx, params, option.WithResponseInto(&raw))
	if err != nil {
		return answer{}, err
	}
	if resp.OutputText() == "" {
		return answer{}, fmt.Errorf("response %s has no text", resp.ID)
	}
	return answer{id: resp.ID, at: servedAt(raw), text: resp.OutputText(), chain: raw.Header.Get("X-SkyWalker-Chain")}, nil
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

	// A GET's answer is labelled as every answer is: the region and
	// replica where the response lives.
	getReq, _ := http.NewRequest("GET", c.Region(regions[1]).URL+"/v1/responses/"+chains[0].last, nil)
	getReq.Header.Set(proxy.GatewayTenantHeader, "tenant-a") // the chain's tenant
	get, err := http.DefaultClient.Do(getReq)
	if err != nil {
		t.Fatal(err)
	}
	getBody, _ := io.ReadAll(get.Body)
	get.Body.Close()
	if at := get.Header.Get("X-SkyWalker-Region") + "/" + get.Header.Get("X-SkyWalker-Replica"); get.StatusCode != 200 || at != chains[0].home {
		t.Errorf("GET through %s: %d, labelled %q, want 200 from chain 0's home %s: %.300s", regions[1], get.StatusCode, at, chains[0].home, getBody)
	}
	// An id created without credentials, read with a key: the refusal says
	// why; a 100 kB id is not echoed whole.
	keyless, err := http.Post(c.Region("us-east").URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","input":"no key","max_output_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ ID string }
	_ = json.NewDecoder(keyless.Body).Decode(&created)
	keyless.Body.Close()
	keyed := clients["us-east"]
	var refused *openai.Error
	if _, err := keyed.Responses.Get(ctx, created.ID, responses.ResponseGetParams{}); !errors.As(err, &refused) || refused.StatusCode != 404 || !strings.Contains(refused.Message, "created without an API key") {
		t.Errorf("a key-less id read with a key: %v, want a 404 saying it was created without one", err)
	}
	long := "resp_sw" + strings.Repeat("A", 100_000)
	if _, err := keyed.Responses.Get(ctx, long, responses.ResponseGetParams{}); !errors.As(err, &refused) || len(refused.Message) > 1000 || !strings.Contains(refused.Message, "100007 bytes") {
		t.Errorf("a 100 kB id: a message of %d bytes (%v), want it cut", len(refused.Message), err)
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

	// The home replica of chain 0 dies: its next turn, from another
	// region (whose proxy passes on the home region's answer), is told at
	// once that the previous response is gone.
	homeRegion, homeReplica, _ := strings.Cut(chains[0].home, "/")
	for _, e := range c.Region(homeRegion).Engines {
		if strings.TrimPrefix(e.URL, "http://") == homeReplica {
			e.Kill()
		}
	}
	elsewhere := regions[0]
	if elsewhere == homeRegion {
		elsewhere = regions[1]
	}
	start := time.Now()
	_, _, err = turn(ctx, clients[elsewhere], chains[0].last, "are you there?", false)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "previous_response_not_found" || !strings.Contains(apiErr.Message, "no longer available") {
		t.Errorf("after the home replica died: %v, want a 400 previous_response_not_found saying it is no longer available", err)
	}
	took := time.Since(start)
	t.Logf("the dead home was reported through %s after %v", elsewhere, took.Round(time.Microsecond))
	if took > 10*time.Second {
		t.Errorf("the dead home was reported after %v: not at once", took)
	}
}

// TestAChainWhoseHomeIsGoneStartsOverWhenAllowed: with
// responses_start_over on, a turn whose previous response is gone — its
// replica dead, or its engine restarted — and that resends the whole
// conversation is served as a new chain (X-SkyWalker-Chain: started-over),
// whose next turns land at its new home; a turn that does not resend the
// conversation still gets previous_response_not_found.
func TestAChainWhoseHomeIsGoneStartsOverWhenAllowed(t *testing.T) {
	c := startCluster(t, clusterOpts{responses: true, startOver: true})
	clients := responsesClients(c)
	ctx := context.Background()
	engineAt := func(at string) *node.Engine {
		region, replica, _ := strings.Cut(at, "/")
		for _, e := range c.Region(region).Engines {
			if strings.TrimPrefix(e.URL, "http://") == replica {
				return e
			}
		}
		t.Fatalf("no engine at %s", at)
		return nil
	}
	conversation := func(turns ...string) responses.ResponseNewParamsInputUnion {
		var items responses.ResponseInputParam
		for i, text := range turns {
			role := responses.EasyInputMessageRoleUser
			if i%2 == 1 {
				role = responses.EasyInputMessageRoleAssistant
			}
			items = append(items, responses.ResponseInputItemParamOfMessage(text, role))
		}
		return responses.ResponseNewParamsInputUnion{OfInputItemList: items}
	}
	ask := func(client openai.Client, previous string, input responses.ResponseNewParamsInputUnion) (answer, error) {
		return respond(ctx, client, responses.ResponseNewParams{Model: "m", MaxOutputTokens: openai.Int(6), Input: input,
			PreviousResponseID: openai.String(previous)})
	}
	var apiErr *openai.Error
	notFound := func(what string, err error) {
		t.Helper()
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "previous_response_not_found" {
			t.Errorf("%s: %v, want a 400 previous_response_not_found", what, err)
		}
	}

	for _, tc := range []struct {
		name     string
		loseIt   func(e *node.Engine) error
		sameHome bool // the chain starts over on the replica it lived on
	}{
		{"the home replica dies", func(e *node.Engine) error { e.Kill(); return nil }, false},
		{"the home engine restarts", func(e *node.Engine) error { return e.Restart() }, true},
	} {
		question := "Plan a trip to Lyon for " + tc.name + "."
		first, err := respond(ctx, clients["us-east"], responses.ResponseNewParams{Model: "m", MaxOutputTokens: openai.Int(6),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(question)}})
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.loseIt(engineAt(first.at)); err != nil {
			t.Fatal(err)
		}
		// Only the new words: nothing to start over from.
		_, err = ask(clients["eu-west"], first.id, conversation("And back?"))
		notFound(tc.name+", the next turn without the conversation", err)

		start := time.Now()
		again, err := ask(clients["eu-west"], first.id, conversation(question, first.text, "And back?"))
		if err != nil {
			t.Fatalf("%s, the next turn resending the conversation: %v, want it served as a new chain", tc.name, err)
		}
		t.Logf("%s: started over on %s (the chain lived on %s) in %v", tc.name, again.at, first.at, time.Since(start).Round(time.Millisecond))
		switch {
		case again.chain != "started-over":
			t.Errorf("%s: X-SkyWalker-Chain %q, want started-over", tc.name, again.chain)
		case !strings.HasPrefix(again.id, "resp_sw") || again.id == first.id:
			t.Errorf("%s: the new chain's id %q", tc.name, again.id)
		case tc.sameHome && again.at != first.at:
			t.Errorf("%s: started over on %s, want its restarted engine %s (healthy, it holds nothing else)", tc.name, again.at, first.at)
		case !tc.sameHome && again.at == first.at:
			t.Errorf("%s: started over on the dead replica %s", tc.name, again.at)
		}
		// The new chain goes on from its new home, from any region.
		next, err := ask(clients["ap-east"], again.id, conversation("And the day after?"))
		if err != nil || next.at != again.at || next.chain != "" {
			t.Errorf("%s, the turn after: served at %s (%q), %v; want the new home %s", tc.name, next.at, next.chain, err, again.at)
		}
	}
	started := 0.0
	for _, r := range c.Regions {
		started += seriesSum(t, r.AdminURL, "skywalker_responses_chains_started_over_total")
	}
	if started != 2 {
		t.Errorf("skywalker_responses_chains_started_over_total: %v over the mesh, want 2", started)
	}
}
