package region

import (
	"container/list"

	"skywalker/internal/policy"
)

// MaxSessions bounds the sessions a region remembers the replica of; the
// least recently served are forgotten first.
const MaxSessions = 65536

// sessions maps a session key (request.Request.Affinity) to the replica
// that last served it, least recently served first out.
type sessions struct {
	byKey map[string]*list.Element
	order list.List // of *sessionEntry, most recent at the front
}

type sessionEntry struct {
	key, replica string
}

func (s *sessions) put(key, replica string) {
	if s.byKey == nil {
		s.byKey = map[string]*list.Element{}
	}
	if e, ok := s.byKey[key]; ok {
		e.Value.(*sessionEntry).replica = replica
		s.order.MoveToFront(e)
		return
	}
	if s.order.Len() >= MaxSessions {
		oldest := s.order.Back()
		delete(s.byKey, oldest.Value.(*sessionEntry).key)
		s.order.Remove(oldest)
	}
	s.byKey[key] = s.order.PushFront(&sessionEntry{key: key, replica: replica})
}

func (s *sessions) replica(key string) (string, bool) {
	e, ok := s.byKey[key]
	if !ok {
		return "", false
	}
	return e.Value.(*sessionEntry).replica, true
}

// creditSession marks the replica that last served session in rs (the
// view's replicas) and credits it with the longest prefix any replica
// holds for the request (see policy.Replica.Session).
func (r *pool) creditSession(session string, rs []policy.Replica) {
	name, ok := r.sessions.replica(session)
	if !ok {
		return
	}
	longest := 0
	for i := range rs {
		longest = max(longest, rs[i].PrefixBlocks)
	}
	for i := range rs {
		if rs[i].Name == name {
			rs[i].Session, rs[i].SessionPrefix = true, longest
			return
		}
	}
}
