package apierr

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"
)

func TestStatusAndTypePerCode(t *testing.T) {
	tests := []struct {
		code   Code
		status int
		typ    string
	}{
		{InvalidRequest, 400, "invalid_request_error"},
		{BodyTooLarge, 413, "invalid_request_error"},
		{BodyTimeout, 408, "invalid_request_error"},
		{ModelNotFound, 404, "invalid_request_error"},
		{QueueFull, 429, "rate_limit_error"},
		{QueueTimeout, 503, "service_unavailable_error"},
		{Unavailable, 503, "service_unavailable_error"},
		{Forbidden, 403, "invalid_request_error"},
		{Upstream, 502, "service_unavailable_error"},
		{Internal, 500, "server_error"},
	}
	for _, tc := range tests {
		e := &Error{Code: tc.code}
		if e.Status() != tc.status || e.Type() != tc.typ {
			t.Errorf("%s: status %d type %s, want %d %s", tc.code, e.Status(), e.Type(), tc.status, tc.typ)
		}
	}
}

func TestWriteSendsOpenAIShapeAndRetryAfter(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, fmt.Errorf("route: %w", &Error{Code: QueueFull, Message: "queue is full", RetryAfter: 1500 * time.Millisecond}))
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "2" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("status %d headers %v", rec.Code, rec.Header())
	}
	var body struct {
		Error struct {
			Message, Type, Code string
			Param               *string
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body.Error.Message != "queue is full" || body.Error.Code != "queue_full" || body.Error.Param != nil {
		t.Errorf("body %s", rec.Body)
	}
}

func TestWriteTurnsPlainErrorsInto500(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, fmt.Errorf("boom"))
	if rec.Code != 500 {
		t.Errorf("status %d, want 500", rec.Code)
	}
	e := Invalid("messages", "bad %d", 1)
	if e.Param != "messages" || e.Error() != "invalid_request: bad 1 (param messages)" {
		t.Errorf("Invalid: %+v %q", e, e.Error())
	}
}

func TestAnthropicShapeStatusesAndTypes(t *testing.T) {
	tests := []struct {
		code   Code
		status int
		typ    string
	}{
		{InvalidRequest, 400, "invalid_request_error"},
		{BodyTooLarge, 413, "request_too_large"},
		{ModelNotFound, 404, "not_found_error"},
		{Forbidden, 403, "permission_error"},
		{QueueFull, 429, "rate_limit_error"},
		{Overloaded, 429, "rate_limit_error"},
		{QueueTimeout, 529, "overloaded_error"},
		{Unavailable, 529, "overloaded_error"},
		{Upstream, 502, "api_error"},
		{Internal, 500, "api_error"},
	}
	for _, tc := range tests {
		rec := httptest.NewRecorder()
		WriteAs(rec, &Error{Code: tc.code, Param: "messages", Message: "why"}, Anthropic)
		var body struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v", tc.code, err)
		}
		if rec.Code != tc.status || body.Type != "error" || body.Error.Type != tc.typ || body.Error.Message != "messages: why" {
			t.Errorf("%s: status %d body %s, want %d type %s", tc.code, rec.Code, rec.Body, tc.status, tc.typ)
		}
		if retry := rec.Header().Get("Retry-After"); (tc.status == 429 || tc.status == 529) != (retry != "") {
			t.Errorf("%s: status %d with Retry-After %q", tc.code, rec.Code, retry)
		}
	}
}
