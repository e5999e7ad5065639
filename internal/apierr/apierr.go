// Package apierr is the closed set of errors SkyWalker returns to clients,
// each mapped to an HTTP status and rendered in the OpenAI error format:
//
//	{"error": {"message": "...", "type": "invalid_request_error", "param": "messages", "code": "invalid_request"}}
//
// Every layer (request parsing, the balancer queue, the proxy, the engine
// server) reports client-visible failures as an *Error so the client gets a
// status it can act on (400, 404, 413, 429 with Retry-After, 503) and a
// sentence that says why. Clients of Anthropic's Messages API get the same
// errors in Anthropic's shape (see Shape):
//
//	{"type": "error", "error": {"type": "overloaded_error", "message": "..."}}
package apierr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Code names one kind of client-visible failure. The set is closed: add a
// code here, with its status, rather than inventing statuses at call sites.
type Code string

// The codes, each with the HTTP status Status returns for it.
const (
	InvalidRequest Code = "invalid_request"     // 400: malformed JSON, wrong types, missing fields
	BodyTooLarge   Code = "body_too_large"      // 413: body over the configured limit
	BodyTimeout    Code = "request_timeout"     // 408: the body arrived too slowly, or not at all
	ModelNotFound  Code = "model_not_found"     // 404: no replica serves the requested model
	NotFound       Code = "not_found"           // 404: unknown path
	QueueFull      Code = "queue_full"          // 429: the balancer queue is at its bound; retry later
	Overloaded     Code = "overloaded"          // 429: the request cannot start within its objective anywhere, or its tenant or class is over its share
	Shed           Code = "shed"                // 429: held until it could no longer meet its objective
	QueueTimeout   Code = "queue_timeout"       // 503: held past the request's deadline
	Unavailable    Code = "service_unavailable" // 503: no healthy replica or eligible region
	Forbidden      Code = "forbidden"           // 403: an unauthenticated forwarding marker, a chain whose home the request's residency forbids
	// PreviousResponseNotFound (400, OpenAI's code): a Responses request's
	// previous_response_id names a response that is not, or no longer,
	// anywhere (its replica is out of service or lost it).
	PreviousResponseNotFound Code = "previous_response_not_found"
	ResponseNotFound         Code = "response_not_found" // 404: GET or cancel of an unknown response
	Upstream                 Code = "upstream_error"     // 502: the replica or peer failed after retries
	Internal                 Code = "internal_error"     // 500: a bug; never expected
)

// Error is a client-visible failure. The zero RetryAfter means no hint.
type Error struct {
	Code       Code
	Message    string        // one sentence a client can read
	Param      string        // the offending field, e.g. "messages[2].content"; may be empty
	RetryAfter time.Duration // sent as the Retry-After header for 429 and 503
}

// New returns an *Error with a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid returns a 400 error about one parameter.
func Invalid(param, format string, args ...any) *Error {
	return &Error{Code: InvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%s: %s (param %s)", e.Code, e.Message, e.Param)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Status is the HTTP status for the error's code.
func (e *Error) Status() int {
	switch e.Code {
	case InvalidRequest, PreviousResponseNotFound:
		return http.StatusBadRequest
	case BodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case BodyTimeout:
		return http.StatusRequestTimeout
	case ModelNotFound, NotFound, ResponseNotFound:
		return http.StatusNotFound
	case QueueFull, Overloaded, Shed:
		return http.StatusTooManyRequests
	case QueueTimeout, Unavailable:
		return http.StatusServiceUnavailable
	case Forbidden:
		return http.StatusForbidden
	case Upstream:
		return http.StatusBadGateway
	default:
		return http.StatusInternalServerError
	}
}

// Type is the OpenAI error "type" field for the error's code.
func (e *Error) Type() string {
	switch e.Status() {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge, http.StatusRequestTimeout, http.StatusForbidden:
		return "invalid_request_error"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return "service_unavailable_error"
	default:
		return "server_error"
	}
}

// As reports whether err is or wraps an *Error, and returns it.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// From converts any error into an *Error; errors that are not already
// client-visible become Internal.
func From(err error) *Error {
	if e, ok := As(err); ok {
		return e
	}
	return &Error{Code: Internal, Message: err.Error()}
}

type body struct {
	Error bodyError `json:"error"`
}

type bodyError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// JSON renders the OpenAI-style error body.
func (e *Error) JSON() []byte {
	b := body{Error: bodyError{Message: e.Message, Type: e.Type(), Code: string(e.Code)}}
	if e.Param != "" {
		p := e.Param
		b.Error.Param = &p
	}
	out, _ := json.Marshal(b) // a struct of strings always marshals
	return out
}

// Write sends err to the client in OpenAI's shape (see WriteAs).
func Write(w http.ResponseWriter, err error) { WriteAs(w, err, OpenAI) }

// RetryAfterSeconds is the Retry-After a client gets, in whole seconds:
// RetryAfter rounded up, and at least 1 for every 429 and 503 (a client
// told to come back is told when); 0 means no header.
func (e *Error) RetryAfterSeconds() int {
	secs := int((e.RetryAfter + time.Second - 1) / time.Second)
	if st := e.Status(); (st == http.StatusTooManyRequests || st == http.StatusServiceUnavailable) && secs < 1 {
		secs = 1
	}
	return secs
}

// Shape is the error format of the API a client speaks: the same *Error
// is rendered in OpenAI's shape or in Anthropic's, whose SDKs retry on
// their own statuses and types.
type Shape int

// The error shapes.
const (
	// OpenAI: {"error": {"message", "type", "param", "code"}} (the default).
	OpenAI Shape = iota
	// Anthropic: {"type": "error", "error": {"type", "message"}}, with
	// Anthropic's statuses: 429 rate_limit_error (with retry-after) for
	// every refusal to start now, and 529 overloaded_error for every
	// 503 (no replica could take it, held past its deadline, draining).
	Anthropic
)

// AnthropicStatus is the HTTP status the error has in Anthropic's API:
// Status, except that a 503 is Anthropic's 529 (overloaded).
func (e *Error) AnthropicStatus() int {
	if st := e.Status(); st != http.StatusServiceUnavailable {
		return st
	}
	return StatusOverloaded
}

// StatusOverloaded is Anthropic's 529: the API is temporarily overloaded.
const StatusOverloaded = 529

// AnthropicType is the Anthropic error "type" for the error's code.
func (e *Error) AnthropicType() string {
	switch e.AnthropicStatus() {
	case http.StatusBadRequest, http.StatusRequestTimeout:
		return "invalid_request_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case StatusOverloaded:
		return "overloaded_error"
	default:
		return "api_error"
	}
}

type anthropicBody struct {
	Type  string         `json:"type"`
	Error anthropicError `json:"error"`
}
type anthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Render is the error's body in shape. Anthropic's shape has no param
// field: the parameter leads the message instead.
func (e *Error) Render(shape Shape) []byte {
	if shape != Anthropic {
		return e.JSON()
	}
	msg := e.Message
	if e.Param != "" {
		msg = e.Param + ": " + msg
	}
	out, _ := json.Marshal(anthropicBody{Type: "error", Error: anthropicError{Type: e.AnthropicType(), Message: msg}})
	return out
}

// StatusIn is the error's HTTP status in shape.
func (e *Error) StatusIn(shape Shape) int {
	if shape == Anthropic {
		return e.AnthropicStatus()
	}
	return e.Status()
}

// WriteAs sends err to the client in shape: status, Retry-After when
// set, and the body. Errors that are not *Error are sent as 500.
func WriteAs(w http.ResponseWriter, err error, shape Shape) {
	e := From(err)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if s := e.RetryAfterSeconds(); s > 0 {
		h.Set("Retry-After", strconv.Itoa(s))
	}
	w.WriteHeader(e.StatusIn(shape))
	_, _ = w.Write(e.Render(shape))
}
