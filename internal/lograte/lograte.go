// Package lograte lets a noisy kind of log line through at most once per
// interval per key (a kind, a source address) and counts the lines it held
// back, so that a flood — garbage on the gossip port, a client replaying
// forged markers — costs one line per interval, saying how many it stood
// for.
package lograte

import (
	"sync"
	"time"
)

// Limiter decides which lines are written. Safe for concurrent use.
type Limiter struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	keys  map[string]*entry
}

type entry struct {
	last       time.Time
	suppressed int
}

// maxKeys bounds the keys remembered; past it, keys quiet for a whole
// interval are forgotten.
const maxKeys = 10_000

// New returns a limiter letting one line per key through every interval;
// now is the clock (time.Now outside tests).
func New(every time.Duration, now func() time.Time) *Limiter {
	return &Limiter{every: every, now: now, keys: map[string]*entry{}}
}

// Allow reports whether a line of key may be written now and, if so, how
// many lines of key were held back since the last one written.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys[key]
	if e == nil {
		if len(l.keys) >= maxKeys {
			l.forgetQuiet(now)
		}
		e = &entry{}
		l.keys[key] = e
	} else if now.Sub(e.last) < l.every {
		e.suppressed++
		return false, 0
	}
	suppressed, e.last, e.suppressed = e.suppressed, now, 0
	return true, suppressed
}

// forgetQuiet drops the keys with nothing written or held back for an
// interval; if every key is busy, it drops them all (the flood is then of
// distinct keys, and each will be written once more).
func (l *Limiter) forgetQuiet(now time.Time) {
	for k, e := range l.keys {
		if now.Sub(e.last) >= l.every && e.suppressed == 0 {
			delete(l.keys, k)
		}
	}
	if len(l.keys) >= maxKeys {
		clear(l.keys)
	}
}
