package proxy

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"skywalker/internal/apierr"
	"skywalker/internal/balancer"
	"skywalker/internal/region"
	"skywalker/internal/request"
)

// TestEveryRefusalAndShedIsCountedAndLoggedOnce drives the router's
// outcome hook as the core calls it, once per request.
func TestEveryRefusalAndShedIsCountedAndLoggedOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Region, cfg.WorkerPool = "us-east", []string{"http://127.0.0.1:1"}
	var logs bytes.Buffer
	s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	outcome := func(id string, class request.Class, tenant string, code apierr.Code) region.Delivery {
		o := balancer.Outcome{Request: &request.Request{ID: id, Class: class, Tenant: tenant}}
		if code != "" {
			o.Err = &apierr.Error{Code: code, Message: "why"}
		}
		return region.Delivery{Outcome: o}
	}
	s.observe(outcome("a", request.Standard, "team-a", apierr.Overloaded))
	s.observe(outcome("b", request.Sheddable, "team-a", apierr.Shed))
	s.observe(outcome("c", request.Critical, "team-b", ""))
	s.observe(outcome("d", request.Standard, "", apierr.QueueTimeout))
	if n := strings.Count(logs.String(), "msg="); n != 2 {
		t.Errorf("%d log lines, want one for the refusal and one for the shed:\n%s", n, logs.String())
	}
	for _, want := range []string{`msg="request refused"`, `id=a priority=standard tenant=team-a`, `msg="request shed"`, `id=b priority=sheddable`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"standard", "team-a", "refused"}, 1},
		{[]string{"sheddable", "team-a", "shed"}, 1},
		{[]string{"critical", "team-b", "admitted"}, 1},
		{[]string{"standard", "none", "timed_out"}, 1},
	} {
		if got := counterValue(t, s, c.labels...); got != c.want {
			t.Errorf("admission_total%v = %v, want %v", c.labels, got, c.want)
		}
	}
}

func counterValue(t *testing.T, s *Server, labels ...string) float64 {
	t.Helper()
	m, err := s.metrics.admission.GetMetricWithLabelValues(labels...)
	if err != nil {
		t.Fatal(err)
	}
	return testutilValue(m)
}

// TestTenantLabelsAreBounded: the first tenants keep their names, later
// ones are "other", and no tenant is "none".
func TestTenantLabelsAreBounded(t *testing.T) {
	l := newTenantLabels(2)
	got := []string{l.label("a"), l.label("b"), l.label("c"), l.label("a"), l.label("")}
	if strings.Join(got, ",") != "a,b,other,a,none" {
		t.Errorf("labels %v", got)
	}
}
