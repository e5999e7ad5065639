package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/mesh"
	"skywalker/internal/policy"
	"skywalker/internal/region"
	"skywalker/internal/request"
	"skywalker/internal/responses"
)

// The Responses API through the proxy (see internal/responses for the
// ids). POST /v1/responses goes through the relay like a chat request;
// one with previous_response_id goes home (policy.Homing) with the
// engine's own id written back into its body. Every response id an
// engine answers with is rewritten into one that names its home. GET
// /v1/responses/{id} and POST /v1/responses/{id}/cancel go straight to
// the home replica, or to a proxy of the home region.

// newResponseIDs is the codec of the mesh's response ids: keyed by the
// gossip keys (none: unsigned, one region).
func newResponseIDs(gossipKeys []string) (responses.Codec, error) {
	var keys [][]byte
	for _, k := range gossipKeys {
		raw, err := mesh.ParseKey(k)
		if err != nil {
			return responses.Codec{}, err
		}
		sum := sha256.Sum256(append([]byte("skywalker-responses-v1\x00"), raw...))
		keys = append(keys, sum[:])
	}
	return responses.NewCodec(keys), nil
}

// chainTenant is the identity a response is bound to: the request's
// owner (the tenant header, an API key's hash); a client known only by its
// address binds nothing, since one client enters different regions from
// different addresses.
func chainTenant(req *request.Request) string { return req.Owner }

// decodeResponse reads a response id a client sent (as param) for
// tenant: its home and the engine's id there. A foreign, malformed,
// forged or another tenant's id is not found (code: the error's).
func (s *Server) decodeResponse(id, tenant, param string, code apierr.Code) (responses.Ref, *apierr.Error) {
	ref, err := s.responseIDs.Decode(id)
	shown := quoteID(id)
	switch {
	case errors.Is(err, responses.ErrNotOurs):
		return ref, &apierr.Error{Code: code, Param: param, Message: fmt.Sprintf("response %s was not issued through this SkyWalker mesh (its ids begin with %s)", shown, responses.Prefix)}
	case err != nil:
		return ref, &apierr.Error{Code: code, Param: param, Message: fmt.Sprintf("response %s not found", shown)}
	case !ref.OwnedBy(tenant) && ref.OwnedBy(""):
		// The client's own id, created without credentials: saying so is
		// no leak, and the fix is the client's.
		return ref, &apierr.Error{Code: code, Param: param, Message: fmt.Sprintf("response %s was created without an API key (or tenant header); it is read and continued only without one", shown)}
	case !ref.OwnedBy(tenant):
		return ref, &apierr.Error{Code: code, Param: param, Message: fmt.Sprintf("response %s not found", shown)}
	}
	return ref, nil
}

// maxShownID is how much of a client's response id an error repeats.
const maxShownID = 96

// quoteID quotes a response id for an error message, cut to maxShownID
// bytes: a client's 100 kB id is not echoed whole.
func quoteID(id string) string {
	if len(id) <= maxShownID {
		return strconv.Quote(id)
	}
	return fmt.Sprintf("%q… (%d bytes)", id[:maxShownID], len(id))
}

// goHome sends a Responses request with previous_response_id home: it
// records where, and the body its home replica is sent (the engine's id
// in place of the client's).
func (s *Server) goHome(req *request.Request, body []byte) ([]byte, *apierr.Error) {
	ref, e := s.decodeResponse(req.PreviousResponse, chainTenant(req), "previous_response_id", apierr.PreviousResponseNotFound)
	if e != nil {
		return nil, e
	}
	req.Home = ref.Home
	if ref.Home.Region != s.cfg.Region {
		return nil, nil // a peer region's proxy rewrites it
	}
	return req.RewritePrevious(append([]byte(nil), body...), ref.EngineID), nil
}

// chainBodies are a Responses chain request's bodies beside the
// client's: home, as its home replica is sent it (the engine's id for
// previous_response_id); fresh, as it is sent when the chain starts over
// (without previous_response_id; nil: it may not, see
// Config.ResponsesStartOver).
type chainBodies struct{ home, fresh []byte }

// bodyFor is the body the routed target o is sent: a chain that starts
// over (its home gone: policy.Homing) goes as a new chain, one at its home
// replica with the engine's id; body otherwise (the client's, or a
// continuation's; a peer region decodes the client's id itself).
func (x *exchange) bodyFor(o routed, body []byte) []byte {
	switch {
	case o.Decision.StartedOver && x.chain.fresh != nil:
		return x.chain.fresh
	case o.replica != nil && x.chain.home != nil:
		return x.chain.home
	}
	return body
}

// drain reads what is left of resp's body (a little) and closes it, so
// that its connection is reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
}

// engineIDs maps the response ids a replica of this region answers with
// (the engine's) to the mesh's, naming replica as their home.
func (s *Server) engineIDs(replica string, req *request.Request) func(string) string {
	home, tenant := request.Home{Region: s.cfg.Region, Replica: replica}, chainTenant(req)
	return func(id string) string {
		if strings.HasPrefix(id, responses.Prefix) {
			return id
		}
		return s.responseIDs.Encode(home, tenant, id)
	}
}

// fromReplica prepares a replica's answer to a Responses request for the
// client: its ids rewritten; a 404 for a previous_response_id (the
// engine no longer holds it: it restarted) made the error a client can
// act on.
func (x *exchange) fromReplica(resp *http.Response, replica string) *http.Response {
	if x.req.PreviousResponse != "" && !x.req.StartedOver && resp.StatusCode == http.StatusNotFound {
		drain(resp)
		e := &apierr.Error{Code: apierr.PreviousResponseNotFound, Param: "previous_response_id",
			Message: fmt.Sprintf("previous response %q is no longer available: the engine that held it (%s in %s) no longer has it (it restarted, or keeps no responses: VLLM_ENABLE_RESPONSES_API_STORE); start a new chain with the whole conversation as input",
				x.req.PreviousResponse, replica, x.s.cfg.Region)}
		return errorResponse(resp, e)
	}
	resp.Body = responses.NewRewriter(resp.Body, x.s.engineIDs(replica, x.req))
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return resp
}

// errorResponse is e as the response to resp's request.
func errorResponse(resp *http.Response, e *apierr.Error) *http.Response {
	body := e.JSON()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return &http.Response{StatusCode: e.Status(), Status: http.StatusText(e.Status()), Proto: resp.Proto, ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor,
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: resp.Request}
}

// firstTokenEvents are, for the endpoints whose streams open with events
// before the first token, the events that come with or after it: the
// first of them is the stream's first token. vLLM sends a Responses
// stream's response.created and in_progress at once; a Messages stream
// opens with message_start, content_block_start and ping.
var firstTokenEvents = map[request.Kind][][]byte{
	request.Responses: {[]byte("response.output_text.delta"), []byte("response.output_item.done"), []byte("response.completed"),
		[]byte("response.incomplete"), []byte("response.failed"), []byte(`"error"`)},
	request.Messages: {[]byte("event: content_block_delta"), []byte("event: message_stop"), []byte("event: error")},
}

// maxOpening bounds what is read ahead of a Responses stream's first
// token.
const maxOpening = 64 << 10

// awaitFirstToken is awaitFirstByte for a Responses stream: it reads
// until the first token's event, so that an engine that fails during
// prefill has still sent the client nothing (the request can go
// elsewhere) and the first token is timed when it comes.
func awaitFirstToken(resp *http.Response, firstTokenEvents [][]byte) error {
	var head []byte
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		head = append(head, buf[:n]...)
		if err == io.EOF || len(head) >= maxOpening || containsAny(head, firstTokenEvents) {
			resp.Body = &prefixedBody{head: head, ReadCloser: resp.Body, eof: err == io.EOF}
			return nil
		}
		if err != nil {
			return fmt.Errorf("upstream failed before its first token: %w", err)
		}
	}
}

func containsAny(b []byte, subs [][]byte) bool {
	for _, s := range subs {
		if bytes.Contains(b, s) {
			return true
		}
	}
	return false
}

// responseOp serves GET /v1/responses/{id} and POST
// /v1/responses/{id}/cancel: at the home replica, or through a proxy of
// the home region (signed, as a forward is, so the tenant travels with
// it).
func (s *Server) responseOp(cancel bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		path := "/v1/responses/" + id
		if cancel {
			path += "/cancel"
		}
		if !cancel {
			streamFromBody(r)
		}
		signed := r.Method + " " + path + "?" + r.URL.RawQuery
		req := &request.Request{}
		if marker := r.Header.Get(ForwardHeader); marker != "" {
			fwd, err := s.acceptForward(r, marker, []byte(signed), time.Now())
			if err != nil {
				s.refused(r, "forwarding marker refused", err)
				s.reject(w, apierr.OpenAI, &apierr.Error{Code: apierr.Forbidden, Message: err.Error()}, "forbidden")
				return
			}
			req.Tenant, req.Owner, req.Forwarded = fwd.Tenant, fwd.Owner, true
		} else if err := s.applyHeaders(req, r); err != nil {
			s.reject(w, apierr.OpenAI, err, "bad_request")
			return
		}
		ref, e := s.decodeResponse(id, chainTenant(req), "response_id", apierr.ResponseNotFound)
		if e != nil {
			s.reject(w, apierr.OpenAI, e, "not_found")
			return
		}
		var up *http.Request
		var mapID func(string) string
		switch home := ref.Home; {
		case home.Region == s.cfg.Region:
			rp, healthy := s.router.replicaNamed(home.Replica)
			if rp == nil || !healthy {
				s.reject(w, apierr.OpenAI, &apierr.Error{Code: apierr.ResponseNotFound, Param: "response_id",
					Message: fmt.Sprintf("response %s is no longer available: the replica that held it (%s) is out of service", quoteID(id), home.Replica)}, "not_found")
				return
			}
			enginePath := "/v1/responses/" + ref.EngineID
			if cancel {
				enginePath += "/cancel"
			}
			up = r.Clone(r.Context())
			up.URL.Scheme, up.URL.Host, up.URL.Path, up.Host, up.RequestURI = rp.url.Scheme, rp.url.Host, enginePath, "", ""
			up.Header.Del(ForwardHeader)
			mapID = s.engineIDs(home.Replica, req)
		case req.Forwarded:
			s.reject(w, apierr.OpenAI, &apierr.Error{Code: apierr.ResponseNotFound, Param: "response_id", Message: fmt.Sprintf("response %s does not live in %s", quoteID(id), s.cfg.Region)}, "not_found")
			return
		default:
			addr, ok := s.router.peerAddr(home.Region)
			if !ok {
				s.reject(w, apierr.OpenAI, &apierr.Error{Code: apierr.Unavailable, RetryAfter: time.Second,
					Message: fmt.Sprintf("the region that holds response %s (%s) is not reachable now", quoteID(id), home.Region)}, "unavailable")
				return
			}
			base, err := parseBase(addr)
			if err != nil {
				s.reject(w, apierr.OpenAI, apierr.New(apierr.Internal, "peer address %q: %v", addr, err), "unavailable")
				return
			}
			up = r.Clone(r.Context())
			up.URL.Scheme, up.URL.Host, up.Host, up.RequestURI = base.Scheme, base.Host, "", ""
			up.Header.Set(ForwardHeader, s.markers.sign(forward{Origin: s.cfg.Region, Dest: home.Region, DestProxy: addr,
				ID: s.cfg.NodeID + "-op-" + fmt.Sprint(s.ids.Add(1)), Tenant: req.Tenant, Owner: req.Owner}, []byte(signed), time.Now()))
			if !s.cfg.ForwardAuthorization {
				for _, h := range CredentialHeaders {
					up.Header.Del(h)
				}
			}
		}
		up.Body, up.ContentLength = http.NoBody, 0
		resp, err := s.upstream.RoundTrip(up)
		if err != nil {
			s.reject(w, apierr.OpenAI, &apierr.Error{Code: apierr.Upstream, Message: fmt.Sprintf("response %s: its home did not answer: %v", quoteID(id), err)}, "failed")
			return
		}
		if resp.StatusCode == http.StatusNotFound && mapID != nil {
			drain(resp)
			s.reject(w, apierr.OpenAI, &apierr.Error{Code: apierr.ResponseNotFound, Param: "response_id",
				Message: fmt.Sprintf("response %s is no longer available: the engine that held it no longer has it", quoteID(id))}, "not_found")
			return
		}
		if mapID != nil {
			resp.Body = responses.NewRewriter(resp.Body, mapID)
			resp.ContentLength = -1
			resp.Header.Del("Content-Length")
		}
		// Labelled as every answer is: where the response lives (its home's
		// proxy sets region and replica) and, at the ingress, that it came
		// from a peer.
		label := func(resp *http.Response) error {
			h := resp.Header
			if mapID != nil {
				h.Set(regionKey, s.cfg.Region)
				h.Set(replicaKey, ref.Home.Replica)
			} else {
				h.Set(ingressKey, s.cfg.Region)
			}
			h.Set(reasonKey, string(policy.ReasonHome))
			s.closeWhenDraining(h)
			return nil
		}
		s.copyResponse(w, r, resp, label, apierr.OpenAI) // the copier every relayed answer goes through
	}
}

// streamFromBody moves a GET's {"stream": true} body (how the OpenAI
// SDKs ask GET /v1/responses/{id} to stream) to the stream query
// parameter, where vLLM reads it.
func streamFromBody(r *http.Request) {
	if r.Body == nil || r.URL.Query().Has("stream") {
		return
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
	var body struct {
		Stream bool `json:"stream"`
	}
	if json.Unmarshal(b, &body) == nil && body.Stream {
		q := r.URL.Query()
		q.Set("stream", "true")
		r.URL.RawQuery = q.Encode()
	}
}

// replicaNamed is the replica named name (host:port) and whether it is
// in service in some pool.
func (r *Router) replicaNamed(name string) (rp *replica, healthy bool) {
	r.do(func(n *region.Node) {
		if rp = r.replicaOf(name); rp != nil {
			healthy = n.Healthy(name)
		}
	})
	return rp, healthy
}

// peerAddr is the address of a proxy of region, from the mesh.
func (r *Router) peerAddr(regionName string) (addr string, ok bool) {
	r.do(func(n *region.Node) {
		for _, p := range n.Peers() {
			if p.Region == regionName && p.Healthy && len(p.APIAddrs) > 0 {
				addr, ok = p.APIAddrs[0], true
				return
			}
		}
	})
	return addr, ok
}
