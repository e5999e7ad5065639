package sim

import (
	"skywalker/internal/request"
	"skywalker/internal/results"
)

// chains follows sessions from turn to turn: for a Responses chain
// (workload ResponsesShare) where its previous response lives — the
// engine its turn reached, where the response exists from then on — so
// that its next turn goes there (request.Home: the region core's
// policy.Homing pins it, as the proxy's ids do); for every session where
// its previous turn was served, so that a run without chains tells how
// many follow-ups moved — each of which, had it been a chain, would have
// broken. (The workload's turns come a think time after the turn before
// arrived, not after it ended: a turn whose previous one has not reached
// an engine yet starts its chain over.)
type chains struct {
	last      map[string]request.Home // session → where its last turn was served
	epochs    map[string]uint32       // session → the incarnation of the engine that served it
	followUps int                     // turns after a session's first that were served
	moved     int                     // of them, served on another replica than the turn before
	chained   int                     // follow-up turns of Responses chains that arrived
	restarted int                     // of them, whose previous turn was never served: begun again
	// startedOver: of them, whose home was gone and that started over
	// (request.StartOver).
	startedOver int
	anew        map[*request.Request]bool
}

// arrive sends a chain's follow-up turn home — and lets it start over if
// its home is gone, when startOver; one whose previous turn was never
// served (dropped, or still running) starts the chain over, as a client
// resending the conversation would.
func (c *chains) arrive(req *request.Request, startOver bool) {
	if req.PreviousResponse == "" {
		return
	}
	c.chained++
	if home, ok := c.last[req.Session]; ok {
		req.Home, req.Resent, req.StartOver = home, true, startOver
		return
	}
	req.PreviousResponse = ""
	c.restarted++
	c.beginAgain(req)
}

// beginAgain marks req's turn as the first of a new chain.
func (c *chains) beginAgain(req *request.Request) {
	if c.anew == nil {
		c.anew = map[*request.Request]bool{}
	}
	c.anew[req] = true
}

// served records the replica req's turn reached.
func (c *chains) served(req *request.Request, rp *replica) {
	if req.Session == "" {
		return
	}
	if c.last == nil {
		c.last = map[string]request.Home{}
	}
	here := request.Home{Region: rp.router.region, Replica: rp.name}
	if c.epochs == nil {
		c.epochs = map[string]uint32{}
	}
	c.epochs[req.Session] = rp.epoch
	if req.StartedOver { // its home was gone, or its engine had lost the response: it started over
		c.startedOver++
		c.beginAgain(req)
	}
	if c.anew[req] { // a chain begun again is no follow-up: it went where it liked
		delete(c.anew, req)
		c.last[req.Session] = here
		return
	}
	if before, ok := c.last[req.Session]; ok {
		c.followUps++
		if before != here {
			c.moved++
		}
	}
	c.last[req.Session] = here
}

// lostAt reports whether req continues a chain whose previous response
// rp's engine has lost: rp is its home, restarted since it served it (the
// engine answers 404, as vLLM does for a response it no longer holds).
func (c *chains) lostAt(req *request.Request, rp *replica) bool {
	if req.Home.IsZero() || req.Home.Replica != rp.name || req.Home.Region != rp.router.region {
		return false
	}
	epoch, ok := c.epochs[req.Session]
	return ok && epoch != rp.epoch
}

// report adds the chain figures to res.
func (c *chains) report(res *results.Result) {
	res.ChainTurns, res.ChainsRestarted, res.ChainsStartedOver = c.chained, c.restarted, c.startedOver
	if c.followUps > 0 {
		res.FollowUpsMoved = results.Round(float64(c.moved)/float64(c.followUps), 4)
	}
}
