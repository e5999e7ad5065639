package proxy_test

import (
	"fmt"

	"skywalker/internal/request"

	"encoding/json"
	"strings"
	"testing"
	"time"

	"skywalker/internal/node/nodetest"
	"skywalker/internal/proxy"
)

func TestServesLocallyAndStreams(t *testing.T) {
	c := startCluster(t, clusterOpts{})
	r := call(t, c.Region("us-east").URL, chat("hello there", 8, true, `,"stream_options":{"include_usage":true}`), nil)
	if r.status != 200 || r.region != "us-east" || r.replica == "" || r.reason == "" {
		t.Fatalf("got %+v", r)
	}
	if r.contentType != "text/event-stream" || !strings.HasSuffix(strings.TrimSpace(r.body), "data: [DONE]") {
		t.Errorf("stream not passed through: %q", r.body)
	}
	nr := call(t, c.Region("eu-west").URL, chat("hello there", 4, false, ""), nil)
	var body struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(nr.body), &body); err != nil || body.Usage.CompletionTokens != 4 {
		t.Errorf("non-streaming response %q (%v)", nr.body, err)
	}
}

func TestResidencyNeverLeavesItsJurisdiction(t *testing.T) {
	c := startCluster(t, clusterOpts{})
	for _, ingress := range []string{"us-east", "eu-west", "ap-east"} {
		for _, how := range []struct {
			body   string
			header map[string]string
		}{
			{chat("my data stays in the EU", 4, true, `,"metadata":{"data_residency":"eu"}`), nil},
			{chat("my data stays in the EU", 4, true, ""), map[string]string{"X-Data-Residency": "eu"}},
		} {
			r := call(t, c.Region(ingress).URL, how.body, how.header)
			if r.status != 200 || r.region != "eu-west" {
				t.Errorf("from %s: status %d served in %q, want eu-west", ingress, r.status, r.region)
			}
		}
	}
	r := call(t, c.Region("us-east").URL, chat("nowhere", 4, false, `,"metadata":{"data_residency":"cn"}`), nil)
	if r.status != 503 {
		t.Errorf("a jurisdiction no region has: status %d, want 503", r.status)
	}
}

func TestALongPrefixSticksToItsReplica(t *testing.T) {
	c := startCluster(t, clusterOpts{})
	system := strings.Repeat("You are the support agent for a cross-region inference platform. ", 150) // ~10 KB
	var first result
	for i := range 6 {
		body := `{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"question ` +
			string(rune('a'+i)) + `"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`
		r := call(t, c.Region("eu-west").URL, body, nil)
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		if i == 0 {
			first = r
			continue
		}
		if r.replica != first.replica || r.region != first.region {
			t.Errorf("request %d went to %s/%s, the prefix is on %s/%s", i, r.region, r.replica, first.region, first.replica)
		}
		if !strings.Contains(r.body, `"cached_tokens":`) || strings.Contains(r.body, `"cached_tokens":0}`) {
			t.Errorf("request %d reused no cache: %s", i, r.body[strings.LastIndex(r.body, "usage"):])
		}
	}
}

func TestBadInputsGetTheirStatus(t *testing.T) {
	c := startCluster(t, clusterOpts{maxQueue: 1, maxInFlight: 1, maxWait: 300 * time.Millisecond})
	us := c.Region("us-east")
	tests := []struct {
		name   string
		body   string
		header map[string]string
		status int
		code   string
	}{
		{"malformed JSON", `{"messages": [`, nil, 400, "invalid_request"},
		{"missing messages", `{"model":"m"}`, nil, 400, "invalid_request"},
		{"unknown model", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, nil, 404, "model_not_found"},
		{"body over the limit", `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 17<<20) + `"}]}`, nil, 413, "body_too_large"},
		{"forged forwarding marker", chat("hi", 2, false, ""), map[string]string{proxy.ForwardHeader: "us-east;x;1;00"}, 403, "forbidden"},
		{"contradicting residency", chat("hi", 2, false, `,"metadata":{"data_residency":"eu"}`), map[string]string{"X-Data-Residency": "us"}, 400, "invalid_request"},
		{"unknown priority", chat("hi", 2, false, ""), map[string]string{proxy.PriorityHeader: "urgent"}, 400, "invalid_request"},
		{"a critical class this deployment does not let clients ask for", chat("hi", 2, false, ""), map[string]string{proxy.PriorityHeader: "critical"}, 400, "invalid_request"},
		{"critical in metadata, not allowed either", chat("hi", 2, false, `,"metadata":{"priority":"critical"}`), nil, 400, "invalid_request"},
		{"unknown priority in metadata", chat("hi", 2, false, `,"metadata":{"priority":"-1000000"}`), nil, 400, "invalid_request"},
		{"an engine scheduling value outside the operator's range", chat("hi", 2, false, `,"priority":-1000000`), nil, 400, "invalid_request"},
		{"tenant key over 256 bytes", chat("hi", 2, false, ""), map[string]string{proxy.GatewayTenantHeader: strings.Repeat("t", 257)}, 400, "invalid_request"},
		{"bad wait flag", chat("hi", 2, false, ""), map[string]string{proxy.WaitHeader: "perhaps"}, 400, "invalid_request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, us.URL, tc.body, tc.header)
			var e struct {
				Error struct{ Code, Message string }
			}
			_ = json.Unmarshal([]byte(r.body), &e)
			if r.status != tc.status || e.Error.Code != tc.code || e.Error.Message == "" {
				t.Errorf("status %d code %q body %.200s; want %d %q", r.status, e.Error.Code, r.body, tc.status, tc.code)
			}
			if strings.Contains(tc.name, "priority") && !strings.Contains(e.Error.Message, request.ClassNames) {
				t.Errorf("the error must name the allowed priorities: %q", e.Error.Message)
			}
		})
	}
}

// TestAForwardedRequestIsNeverForwardedAgain sends eu-west a request that
// us-east forwarded (a valid marker) while eu-west has no healthy replica:
// eu-west must hold it and time out rather than pass it on.
func TestAForwardedRequestIsNeverForwardedAgain(t *testing.T) {
	c := startCluster(t, clusterOpts{maxWait: 500 * time.Millisecond})
	eu := c.Region("eu-west")
	for _, e := range eu.Engines {
		e.Kill()
	}
	nodetest.Eventually(t, 30*time.Second, "eu-west ejects its replicas", func() (bool, string) {
		n := eu.Proxy.HealthyReplicas()
		return n == 0, fmt.Sprintf("%d replicas in service", n)
	})
	body := chat("forwarded once", 2, false, "")
	marker := proxy.SignMarker(eu.Proxy, "us-east", "already-forwarded", []byte(body))
	// On the client port a forwarded request is refused: peers forward over TLS.
	if r := call(t, eu.URL, body, map[string]string{proxy.ForwardHeader: marker}); r.status != 403 || !strings.Contains(r.body, "over TLS only") {
		t.Errorf("a forwarded request on the plain client port: status %d %.200s; want 403", r.status, r.body)
	}
	peerClient, err := c.PeerClient()
	if err != nil {
		t.Fatal(err)
	}
	r := callWith(t, peerClient, eu.PeerURL, body, map[string]string{proxy.ForwardHeader: marker})
	if r.status != 503 {
		t.Errorf("status %d served by %q: a forwarded request must be served here or fail, never forwarded again", r.status, r.region)
	}
	// Without the marker, eu-west may send the same request to a peer.
	r = call(t, eu.URL, chat("not forwarded yet", 2, false, ""), nil)
	if r.status != 200 || r.region == "eu-west" {
		t.Errorf("status %d region %q: an unmarked request should go to a healthy peer", r.status, r.region)
	}
}
