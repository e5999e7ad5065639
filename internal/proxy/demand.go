package proxy

import (
	"sort"
	"sync"
	"time"
)

// demand records this proxy's demand per hour, for `skywalker plan`.
type demand struct {
	mu     sync.Mutex
	region string
	hours  map[int64]*HourDemand // by unix hour
}

// HourDemand is one hour's demand at one proxy.
type HourDemand struct {
	Hour         time.Time `json:"hour"`
	Requests     int64     `json:"requests"`
	PromptTokens int64     `json:"prompt_tokens"`
	OutputTokens int64     `json:"output_tokens"`
}

// demandRetention is how many hours are kept (a week).
const demandRetention = 7 * 24

func newDemand(region string) *demand { return &demand{region: region, hours: map[int64]*HourDemand{}} }

func (d *demand) add(at time.Time, prompt, output int) {
	h := at.UTC().Truncate(time.Hour)
	key := h.Unix() / 3600
	d.mu.Lock()
	defer d.mu.Unlock()
	hd := d.hours[key]
	if hd == nil {
		hd = &HourDemand{Hour: h}
		d.hours[key] = hd
		for k := range d.hours {
			if k <= key-demandRetention {
				delete(d.hours, k)
			}
		}
	}
	hd.Requests++
	hd.PromptTokens += int64(prompt)
	hd.OutputTokens += int64(output)
}

// DemandReport is GET /v1/skywalker/demand.
type DemandReport struct {
	Region string       `json:"region"`
	Hours  []HourDemand `json:"hours"`
}

func (d *demand) report() DemandReport {
	d.mu.Lock()
	defer d.mu.Unlock()
	rep := DemandReport{Region: d.region, Hours: make([]HourDemand, 0, len(d.hours))}
	for _, h := range d.hours {
		rep.Hours = append(rep.Hours, *h)
	}
	sort.Slice(rep.Hours, func(i, j int) bool { return rep.Hours[i].Hour.Before(rep.Hours[j].Hour) })
	return rep
}
