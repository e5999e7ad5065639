// Package price is what GPUs cost: a price book of dollars per GPU-hour
// by GPU model and by region — reserved under a 1- or 3-year commitment,
// on demand (and whether a region offers it at all), and optionally spot
// with the share of its capacity lost to preemption — with the shipped
// defaults and their public source. Every price it resolves says where it
// came from: the default with its source, or the line of the book that
// set it.
package price

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"skywalker/internal/strictyaml"
)

// Term is a reserved commitment's length.
type Term string

// The commitment terms a book prices.
const (
	OneYear   Term = "1y"
	ThreeYear Term = "3y"
)

// HoursPerMonth is the month money is reported in: 730 hours (8,760 ÷ 12),
// the month cloud price lists use.
const HoursPerMonth = 730.0

// Rates are one GPU's prices per hour in dollars, as a book line gives
// them: nil fields are not set by this line.
type Rates struct {
	OnDemand   *float64 `yaml:"on_demand"`
	Reserved1y *float64 `yaml:"reserved_1y"`
	Reserved3y *float64 `yaml:"reserved_3y"`
	// Spot, if set, is offered at this price; SpotPreemption is the share
	// of spot capacity expected lost to preemption in an hour, [0, 1).
	Spot           *float64 `yaml:"spot"`
	SpotPreemption *float64 `yaml:"spot_preemption"`
	// NoOnDemand: the region (or GPU) cannot be rented by the hour — a
	// sovereign region, or a GPU sold out on demand.
	NoOnDemand bool `yaml:"no_on_demand"`
}

// Book is a price book: which reserved term the plan buys, and prices by
// GPU model and by region, each overriding the shipped defaults (a
// region's line overrides its GPU's).
type Book struct {
	Term    Term             `yaml:"term"`
	GPUs    map[string]Rates `yaml:"gpus"`
	Regions map[string]Rates `yaml:"regions"`
}

// Price is what one GPU costs in one region, resolved, with where each
// figure came from.
type Price struct {
	GPU  string `json:"gpu"`
	Term Term   `json:"term"`
	// Reserved is $/GPU-hour under Term, paid every hour of the day.
	Reserved float64 `json:"reserved_per_gpu_hour"`
	// OnDemand is $/GPU-hour, paid for the hours used; 0 with
	// !OnDemandAvailable.
	OnDemand          float64 `json:"on_demand_per_gpu_hour"`
	OnDemandAvailable bool    `json:"on_demand_available"`
	// Spot is $/GPU-hour when offered (0: not offered); a spot replica
	// counts for 1 − SpotPreemption of its capacity.
	Spot           float64 `json:"spot_per_gpu_hour,omitempty"`
	SpotPreemption float64 `json:"spot_preemption,omitempty"`
	// Source says where the prices came from.
	Source string `json:"source"`
}

// DefaultSource is where the shipped prices come from; a resolved price
// from them says Default.
const DefaultSource = "Google Cloud Compute Engine list prices, us-central1, " +
	"per GPU of the machine type (g2-standard-4 for L4, a2-ultragpu-1g for A100 80GB, a3-highgpu-8g ÷ 8 for H100), " +
	"as published in 2025 (cloud.google.com/compute/vm-instance-pricing); reserved = committed-use discount, " +
	"37% off for 1 year, 55% off for 3 years; no spot by default. Prices differ by region and contract: override them"

// Default is a resolved price's source when the shipped defaults set it.
const Default = "default (see the default price source)"

// Committed-use discounts of the default source, off the on-demand price.
const (
	discount1y = 0.37
	discount3y = 0.55
)

// defaultOnDemand is each shipped GPU's on-demand $/GPU-hour (DefaultSource).
var defaultOnDemand = map[string]float64{
	"L4":        0.7068,
	"A100-80GB": 5.0688,
	"H100-80GB": 11.0312,
}

// GPUs lists the GPU models the defaults price.
func GPUs() []string {
	out := make([]string, 0, len(defaultOnDemand))
	for g := range defaultOnDemand {
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}

// maxBookBytes bounds a price book file.
const maxBookBytes = 1 << 20

// Parse reads a price book (YAML) strictly: unknown fields, negative or
// non-finite prices and preemption outside [0, 1) are errors that name
// the line.
func Parse(data []byte) (*Book, error) {
	if len(data) > maxBookBytes {
		return nil, fmt.Errorf("price book is %d bytes, over the %d-byte limit", len(data), maxBookBytes)
	}
	var b Book
	if err := strictyaml.Decode(data, &b); err != nil {
		return nil, fmt.Errorf("price book: %w", err)
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &b, nil
}

// Validate checks a book's values; a book embedded in a scenario is
// checked with it.
func (b *Book) Validate() error {
	if b == nil {
		return nil
	}
	if b.Term != "" && b.Term != OneYear && b.Term != ThreeYear {
		return fmt.Errorf("price book: term must be 1y or 3y, not %q", b.Term)
	}
	var errs []error
	for _, set := range []struct {
		what  string
		lines map[string]Rates
	}{{"gpus", b.GPUs}, {"regions", b.Regions}} {
		for name, r := range set.lines {
			if err := r.validate(); err != nil {
				errs = append(errs, fmt.Errorf("price book: %s.%s: %w", set.what, name, err))
			}
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

func (r Rates) validate() error {
	for _, f := range []struct {
		name string
		v    *float64
	}{{"on_demand", r.OnDemand}, {"reserved_1y", r.Reserved1y}, {"reserved_3y", r.Reserved3y}, {"spot", r.Spot}} {
		if f.v != nil && (*f.v < 0 || math.IsNaN(*f.v) || math.IsInf(*f.v, 0)) {
			return fmt.Errorf("%s must be a non-negative number of dollars per GPU-hour", f.name)
		}
	}
	if p := r.SpotPreemption; p != nil && (*p < 0 || *p >= 1 || math.IsNaN(*p)) {
		return errors.New("spot_preemption must be in [0, 1)")
	}
	return nil
}

// Resolve is what one GPU of model gpu costs in region: the default, the
// book's line for the GPU over it, the region's line over that. A GPU
// without a default needs the book to price it (on demand, or the term's
// reserved price) or it is an error naming the GPU.
func (b *Book) Resolve(region, gpu string) (Price, error) {
	var book Book
	if b != nil {
		book = *b
	}
	p := Price{GPU: gpu, Term: book.Term, OnDemandAvailable: true}
	if p.Term == "" {
		p.Term = OneYear
	}
	var sources []string
	reserved1y, reserved3y := math.NaN(), math.NaN()
	od, onDemandKnown := defaultOnDemand[gpu]
	if onDemandKnown {
		p.OnDemand = od
		reserved1y, reserved3y = od*(1-discount1y), od*(1-discount3y)
		sources = append(sources, Default)
	}
	apply := func(r Rates, where string) {
		set := false
		if r.OnDemand != nil {
			p.OnDemand, set = *r.OnDemand, true
			onDemandKnown = true
			if r.Reserved1y == nil && r.Reserved3y == nil {
				// a new on-demand price carries the default source's
				// discounts, unless the line prices the commitment itself
				reserved1y, reserved3y = p.OnDemand*(1-discount1y), p.OnDemand*(1-discount3y)
			}
		}
		if r.Reserved1y != nil {
			reserved1y, set = *r.Reserved1y, true
		}
		if r.Reserved3y != nil {
			reserved3y, set = *r.Reserved3y, true
		}
		if r.Spot != nil {
			p.Spot, set = *r.Spot, true
		}
		if r.SpotPreemption != nil {
			p.SpotPreemption, set = *r.SpotPreemption, true
		}
		if r.NoOnDemand {
			p.OnDemandAvailable, set = false, true
		}
		if set {
			sources = append(sources, "configured: "+where)
		}
	}
	if r, ok := book.GPUs[gpu]; ok {
		apply(r, "gpus."+gpu)
	}
	if r, ok := book.Regions[region]; ok {
		apply(r, "regions."+region)
	}
	p.Reserved = reserved1y
	if p.Term == ThreeYear {
		p.Reserved = reserved3y
	}
	if math.IsNaN(p.Reserved) {
		return Price{}, fmt.Errorf("price: no price for GPU %q in region %s (known: %s): give it in the price book's gpus or regions", gpu, region, strings.Join(GPUs(), ", "))
	}
	if !onDemandKnown && p.OnDemandAvailable {
		p.OnDemandAvailable = false // reserved only: nothing says what an hour on demand costs
		sources = append(sources, "no on-demand price given: none rented")
	}
	if !p.OnDemandAvailable {
		p.OnDemand = 0
	}
	p.Source = strings.Join(sources, "; ")
	return p, nil
}
