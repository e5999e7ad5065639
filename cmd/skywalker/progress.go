package main

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows a bar (done / total, an ETA and a description) on a
// terminal once a command has run for more than two seconds; it stays
// silent on pipes and with --quiet.
type progress struct {
	mu    sync.Mutex
	bar   *progressbar.ProgressBar
	done  int
	total int
	what  string
	timer *time.Timer
}

func newProgress(w io.Writer, total int, quiet bool, what string) *progress {
	p := &progress{total: total, what: what}
	if quiet || !isTerminal(w) {
		return p
	}
	p.timer = time.AfterFunc(2*time.Second, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.done < p.total {
			p.bar = progressbar.NewOptions(p.total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(p.what),
				progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish())
			_ = p.bar.Set(p.done)
		}
	})
	return p
}

// describe replaces the bar's description (a live figure, say).
func (p *progress) describe(what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.what = what
	if p.bar != nil {
		p.bar.Describe(what)
	}
}

func (p *progress) add() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if p.bar != nil {
		_ = p.bar.Add(1)
	}
}

// set moves the bar to done of total (the total may grow as the work
// reveals itself).
func (p *progress) set(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.total = done, max(total, done)
	if p.bar != nil {
		p.bar.ChangeMax(p.total)
		_ = p.bar.Set(done)
	}
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar = nil
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
