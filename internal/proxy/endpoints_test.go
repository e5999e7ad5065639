package proxy

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"skywalker/internal/apierr"
	"skywalker/internal/request"
)

// TestTheReadmeListsEveryEndpoint holds README's endpoint table and
// request.Endpoints alike, path for path, and the Helm chart's notes name each.
func TestTheReadmeListsEveryEndpoint(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(readme), "<!-- endpoints:begin -->")
	table, _, ok := strings.Cut(table, "<!-- endpoints:end -->")
	if !ok {
		t.Fatal("README.md has no endpoints table (<!-- endpoints:begin --> … <!-- endpoints:end -->)")
	}
	var listed, served []string
	for _, m := range regexp.MustCompile("`POST (/[^`]*)`").FindAllStringSubmatch(table, -1) {
		listed = append(listed, m[1])
	}
	for _, e := range request.Endpoints {
		served = append(served, e.Path)
	}
	slices.Sort(listed)
	slices.Sort(served)
	if !slices.Equal(listed, served) {
		t.Errorf("README lists %v; the proxy serves %v", listed, served)
	}
	notes, err := os.ReadFile("../../deploy/helm/skywalker/templates/NOTES.txt")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`/[a-z0-9_/]+`).FindAllString(string(notes), -1)
	for _, path := range served {
		if !slices.Contains(named, path) {
			t.Errorf("the Helm chart's NOTES.txt does not name %s", path)
		}
	}
}

// TestEveryEndpointRefusesABadBodyInItsAPIsShape: an empty object sent to
// each endpoint is the proxy's own 400 (the route exists), in Anthropic's
// shape for Messages and count_tokens and OpenAI's elsewhere.
func TestEveryEndpointRefusesABadBodyInItsAPIsShape(t *testing.T) {
	addr := serveOne(t, []string{"http://127.0.0.1:1"}, nil)
	for _, e := range request.Endpoints {
		resp, err := http.Post("http://"+addr+e.Path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Type  string
			Error struct{ Type, Code, Param string }
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		anthropic := e.Kind.Shape() == apierr.Anthropic
		switch {
		case err != nil || resp.StatusCode != 400:
			t.Errorf("%s: status %d (%v), want 400", e.Path, resp.StatusCode, err)
		case anthropic && (body.Type != "error" || body.Error.Type != "invalid_request_error"):
			t.Errorf("%s: %+v, want Anthropic's invalid_request_error", e.Path, body)
		case !anthropic && (body.Error.Code != "invalid_request" || body.Error.Param == ""):
			t.Errorf("%s: %+v, want OpenAI's invalid_request naming the field", e.Path, body)
		}
	}
}
