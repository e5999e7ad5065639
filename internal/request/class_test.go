package request

import (
	"strings"
	"testing"
	"time"
)

func TestAnSLOScalesWithThePrompt(t *testing.T) {
	ms := time.Millisecond
	slo := SLO{TTFT: 2 * time.Second, PerKTokens: 100 * ms}
	tests := []struct {
		prompt int
		want   time.Duration
	}{
		{0, 2 * time.Second},
		{500, 2050 * ms},
		{100_000, 12 * time.Second},
		{-5, 2 * time.Second},
	}
	for _, tc := range tests {
		if got := slo.For(tc.prompt); got != tc.want {
			t.Errorf("For(%d) = %v, want %v", tc.prompt, got, tc.want)
		}
	}
	if got := slo.String(); got != "2s + 100ms per 1k prompt tokens" {
		t.Errorf("String() = %q", got)
	}
	if (SLO{}).For(1000) != 0 {
		t.Error("the zero SLO must be no objective")
	}
}

func TestPriorityClasses(t *testing.T) {
	tests := []struct {
		in      string
		want    Class
		wantErr bool
	}{
		{"", Standard, false},
		{"critical", Critical, false},
		{" Sheddable ", Sheddable, false},
		{"standard", Standard, false},
		{"urgent", Standard, true},
		{"-1000000", Standard, true},
	}
	for _, tc := range tests {
		got, err := ParseClass(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseClass(%q) = %v, %v", tc.in, got, err)
		}
		if err != nil && !strings.Contains(err.Error(), ClassNames) {
			t.Errorf("the error must name the allowed values: %v", err)
		}
	}
	if Critical.Rank() >= Standard.Rank() || Standard.Rank() >= Sheddable.Rank() {
		t.Error("dispatch order must be critical, standard, sheddable")
	}
}

func TestPriorityAndWaitFromBodyAndHeaders(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"hi"}],"metadata":{"priority":"critical","wait":"true"}}`
	req, err := Parse(Chat, []byte(body), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if req.Class != Critical || !req.Wait {
		t.Errorf("class %v wait %v, want critical and true", req.Class, req.Wait)
	}
	if err := req.ApplyPriorityHeader("critical"); err != nil {
		t.Errorf("an agreeing header: %v", err)
	}
	if err := req.ApplyPriorityHeader("sheddable"); err == nil {
		t.Error("a header contradicting the body must be a 400")
	}
	for _, bad := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"metadata":{"priority":"urgent"}}`,
		`{"messages":[{"role":"user","content":"hi"}],"metadata":{"wait":"maybe"}}`,
	} {
		if _, err := Parse(Chat, []byte(bad), Options{}); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	plain, _ := Parse(Chat, []byte(`{"messages":[{"role":"user","content":"hi"}]}`), Options{})
	if err := plain.ApplyPriorityHeader("sheddable"); err != nil || plain.Class != Sheddable {
		t.Errorf("header alone: %v %v", plain.Class, err)
	}
	if err := plain.ApplyWaitHeader("1"); err != nil || !plain.Wait {
		t.Errorf("wait header: %v %v", plain.Wait, err)
	}
	if err := plain.ApplyWaitHeader("perhaps"); err == nil {
		t.Error("a bad wait header must be a 400")
	}
	if err := plain.SetTenant("X-Tenant", strings.Repeat("t", MaxTenantBytes+1)); err == nil {
		t.Error("a tenant key over 256 bytes must be a 400")
	}
	if err := plain.SetTenant("X-Tenant", "team-a"); err != nil || plain.Tenant != "team-a" {
		t.Errorf("tenant: %q %v", plain.Tenant, err)
	}
}

func TestRewriteModelReplacesOnlyTheModelString(t *testing.T) {
	body := []byte(`{ "model" : "public\u0031", "messages":[{"role":"user","content":"model: public1"}]}`)
	req, err := Parse(Chat, body, Options{})
	if err != nil || req.Model != "public1" {
		t.Fatalf("parse: %v %q", err, req.Model)
	}
	out := req.RewriteModel(body, "meta-llama/Llama-3.1-8B")
	want := `{ "model" : "meta-llama/Llama-3.1-8B", "messages":[{"role":"user","content":"model: public1"}]}`
	if string(out) != want || req.Model != "meta-llama/Llama-3.1-8B" {
		t.Errorf("got %s (model %q)", out, req.Model)
	}
	again, err := Parse(Chat, out, Options{})
	if err != nil || again.Model != req.Model || again.PromptTokens != req.PromptTokens {
		t.Errorf("the rewritten body parses to %+v, %v", again, err)
	}
	none, _ := Parse(Chat, []byte(`{"messages":[{"role":"user","content":"hi"}]}`), Options{})
	if got := none.RewriteModel([]byte(`{"messages":[{"role":"user","content":"hi"}]}`), "x"); string(got) != `{"messages":[{"role":"user","content":"hi"}]}` {
		t.Errorf("a body without a model changed: %s", got)
	}
}
