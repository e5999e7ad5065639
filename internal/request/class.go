package request

import (
	"strings"
	"time"

	"skywalker/internal/apierr"
)

// Class is a request's priority class. The names follow the Gateway API
// Inference Extension's criticality (InferenceObjective priority > 0 is
// critical, 0 standard, < 0 sheddable): critical requests are dispatched
// first and shed last, sheddable ones are refused first when a region is
// saturated. The zero value is Standard.
type Class uint8

// The classes.
const (
	Standard Class = iota
	Critical
	Sheddable
	NumClasses int = 3
)

// Classes lists the classes in dispatch order.
var Classes = []Class{Critical, Standard, Sheddable}

// Rank is the class's place in dispatch order: 0 is served first.
func (c Class) Rank() int {
	switch c {
	case Critical:
		return 0
	case Sheddable:
		return 2
	default:
		return 1
	}
}

func (c Class) String() string {
	switch c {
	case Critical:
		return "critical"
	case Sheddable:
		return "sheddable"
	default:
		return "standard"
	}
}

// ClassNames is the allowed values, for error messages and docs.
const ClassNames = "critical, standard, sheddable"

// ParseClass reads a class name, case-insensitively; "" is Standard.
func ParseClass(s string) (Class, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "standard":
		return Standard, nil
	case "critical":
		return Critical, nil
	case "sheddable":
		return Sheddable, nil
	}
	return Standard, apierr.Invalid("priority", "unknown priority %q: use one of %s", s, ClassNames)
}

// ApplyPriorityHeader merges an X-SkyWalker-Priority header into the
// request. A header that contradicts the body's metadata.priority is a
// 400: the client asked for two classes.
func (r *Request) ApplyPriorityHeader(value string) error {
	if strings.TrimSpace(value) == "" {
		return nil
	}
	c, err := ParseClass(value)
	if err != nil {
		return err
	}
	if r.classSet && r.Class != c {
		return apierr.Invalid("metadata.priority", "X-SkyWalker-Priority %q contradicts metadata.priority %q", c, r.Class)
	}
	r.Class, r.classSet = c, true
	return nil
}

// MaxTenantBytes bounds a tenant key: longer ones are refused (400), so
// that tenant keys cannot bloat the balancer's state.
const MaxTenantBytes = 256

// SetTenant sets the request's tenant from a header value, refusing keys
// over MaxTenantBytes.
func (r *Request) SetTenant(header, value string) error {
	if len(value) > MaxTenantBytes {
		return apierr.Invalid(header, "the tenant key is %d bytes, more than %d", len(value), MaxTenantBytes)
	}
	r.Tenant = value
	return nil
}

// SLO is a time-to-first-token objective: TTFT for any request, plus
// PerKTokens for every thousand prompt tokens. A flat objective cannot be
// met by a long prompt even on an idle replica (a 100k-token prompt
// prefills for seconds), so traces of long contexts scale it with length.
// The zero SLO is no objective.
type SLO struct {
	TTFT       time.Duration `json:"ttft_ns"`
	PerKTokens time.Duration `json:"per_1k_tokens_ns,omitempty"`
}

// For is the objective of a request with promptTokens prompt tokens; zero
// when the SLO is zero.
func (s SLO) For(promptTokens int) time.Duration {
	if s.TTFT <= 0 {
		return 0
	}
	return s.TTFT + time.Duration(int64(s.PerKTokens)*int64(max(promptTokens, 0))/1000)
}

// String describes the objective: "2s", or "2s + 100ms per 1k prompt tokens".
func (s SLO) String() string {
	if s.PerKTokens <= 0 {
		return s.TTFT.String()
	}
	return s.TTFT.String() + " + " + s.PerKTokens.String() + " per 1k prompt tokens"
}
