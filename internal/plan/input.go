package plan

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"skywalker/internal/policy"
	"skywalker/internal/profile"
	"skywalker/internal/sim"
	"skywalker/internal/strictyaml"
	"skywalker/internal/workload"
)

// FromScenario reads demand from a scenario's diurnal workload: each
// region's request rate at every hour of the day (UTC). For a scenario of
// several models it is their demand together; FromScenarioModel plans one.
func FromScenario(s *sim.Scenario) (Input, error) { return FromScenarioModel(s, "") }

// FromScenarioModel is FromScenario for one model of a scenario of
// several: its share of each region's demand, and the typical request's
// time to first token on its replicas' profile. model "" is all demand.
func FromScenarioModel(s *sim.Scenario, model string) (Input, error) {
	share, prof := 1.0, ""
	if model != "" {
		total := 0.0
		for _, m := range s.Models {
			total += m.Share
			if m.Name == model {
				share, prof = m.Share, m.Profile
			}
		}
		if prof == "" {
			return Input{}, fmt.Errorf("plan: the scenario has no model %q", model)
		}
		share /= total
	}
	cfg, wl, err := s.Build("")
	if err != nil {
		return Input{}, err
	}
	if wl.Diurnal == nil {
		return Input{}, errors.New("plan: the scenario's workload is not a diurnal curve; give demand as CSV or YAML")
	}
	d := wl.Diurnal
	in := Input{RTT: map[[2]string]time.Duration{}, MaxWANRTT: cfg.PolicyConfig.Skywalker.MaxWANRTT}
	if in.Objective, in.TTFT, err = typicalTTFT(cfg, wl, prof); err != nil {
		return Input{}, err
	}
	for i, r := range cfg.Regions {
		reg := Region{Name: r.Name, Jurisdiction: r.Jurisdiction, ResidencyShare: d.ResidencyShare, NoReplicas: model != "" && !s.Serves(r.Name, model),
			Profile: profileName(s.Regions[i].Profile)}
		if model != "" {
			reg.Profile = prof
		}
		for h := range Hours {
			// The workload's clock: hour h of the day is offset h/24 of a day
			// after StartHour.
			t := time.Duration((float64((h-int(d.StartHour)+24)%24) / 24) * float64(d.Day))
			reg.Demand[h] = share * d.Rate(i, t)
		}
		in.Regions = append(in.Regions, reg)
		for j := i + 1; j < len(cfg.Regions); j++ {
			in.RTT[[2]string{r.Name, cfg.Regions[j].Name}] = cfg.RTT[i][j]
		}
	}
	return in, nil
}

// typicalSample is how many arrivals typicalTTFT reads.
const typicalSample = 2000

// typicalTTFT is the reach rule's request for a plan: the objective and
// the idle prefill time, on profile prof (default the first region's), of
// the median prompt among the workload's first arrivals. With admission
// off (no objective) it is zero, and reach is the WAN cap alone.
func typicalTTFT(cfg sim.Config, wl *sim.Workload, prof string) (objective, ttft time.Duration, err error) {
	src, err := wl.Source()
	if err != nil {
		return 0, 0, fmt.Errorf("plan: the scenario's workload: %w", err)
	}
	var prompts []int
	for len(prompts) < typicalSample {
		a, ok := src.Next()
		if !ok {
			break
		}
		prompts = append(prompts, a.Request.PromptTokens)
	}
	if len(prompts) == 0 || len(cfg.Regions) == 0 {
		return 0, 0, nil
	}
	slices.Sort(prompts)
	median := prompts[len(prompts)/2]
	p := cfg.Regions[0].PoolSpecs()[0].Profile
	if prof != "" {
		if p, err = profile.Lookup(prof); err != nil {
			return 0, 0, err
		}
	}
	return cfg.SLO.For(median), policy.PrefillOf(p).Time(median), nil
}

// Demand files. CSV: a header naming region and hour columns and one of
// requests_per_s or tokens_per_s (prompt_tokens_per_s + output_tokens_per_s
// also work), optionally jurisdiction and residency_share; one row per
// region and hour 0..23. YAML:
//
//	regions:
//	  - name: us-east
//	    jurisdiction: us
//	    residency_share: 0.05
//	    demand: [12.1, 11.8, ...]   # 24 hourly values
//	    profile: llama3-8b-h100     # optional: its hardware (default --profile)
//	    capacity: 11.9              # optional: requests/s one replica serves (default --capacity)
//	rtt_ms: {us-east/eu-west: 72}
//	max_wan_rtt_ms: 1000     # optional cap on reach
//	ttft_objective_ms: 2000  # optional: reach follows the objective
//	ttft_ms: 300             # a typical request's TTFT where served, without the RTT
const maxDemandBytes = 4 << 20

// ParseDemandCSV reads a demand CSV.
func ParseDemandCSV(r io.Reader) (Input, error) {
	cr := csv.NewReader(io.LimitReader(r, maxDemandBytes))
	header, err := cr.Read()
	if err != nil {
		return Input{}, fmt.Errorf("demand csv header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.ToLower(strings.TrimSpace(h))] = i
	}
	ri, okR := col["region"]
	hi, okH := col["hour"]
	if !okR || !okH {
		return Input{}, errors.New("demand csv: the header needs region and hour columns")
	}
	valueCols := []string{"requests_per_s"}
	if _, ok := col["requests_per_s"]; !ok {
		valueCols = nil
		for _, c := range []string{"tokens_per_s", "prompt_tokens_per_s", "output_tokens_per_s"} {
			if _, ok := col[c]; ok {
				valueCols = append(valueCols, c)
			}
		}
		if len(valueCols) == 0 {
			return Input{}, errors.New("demand csv: the header needs requests_per_s or tokens_per_s")
		}
	}
	in := Input{}
	index := map[string]int{}
	seen := map[[2]int]bool{}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Input{}, fmt.Errorf("demand csv line %d: %w", line, err)
		}
		name := strings.TrimSpace(rec[ri])
		hour, err := strconv.Atoi(strings.TrimSpace(rec[hi]))
		if name == "" || err != nil || hour < 0 || hour >= Hours {
			return Input{}, fmt.Errorf("demand csv line %d: want a region name and an hour in 0..23", line)
		}
		v := 0.0
		for _, c := range valueCols {
			x, err := strconv.ParseFloat(strings.TrimSpace(rec[col[c]]), 64)
			if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
				return Input{}, fmt.Errorf("demand csv line %d: %s must be a non-negative number", line, c)
			}
			v += x
		}
		i, ok := index[name]
		if !ok {
			i = len(in.Regions)
			index[name] = i
			in.Regions = append(in.Regions, Region{Name: name})
		}
		if seen[[2]int{i, hour}] {
			return Input{}, fmt.Errorf("demand csv line %d: region %s hour %d given twice", line, name, hour)
		}
		seen[[2]int{i, hour}] = true
		in.Regions[i].Demand[hour] = v
		if c, ok := col["jurisdiction"]; ok {
			in.Regions[i].Jurisdiction = strings.TrimSpace(rec[c])
		}
		if c, ok := col["residency_share"]; ok {
			if x, err := strconv.ParseFloat(strings.TrimSpace(rec[c]), 64); err == nil && x >= 0 && x <= 1 {
				in.Regions[i].ResidencyShare = x
			} else {
				return Input{}, fmt.Errorf("demand csv line %d: residency_share must be in [0, 1]", line)
			}
		}
	}
	if len(in.Regions) == 0 {
		return Input{}, errors.New("demand csv has no rows")
	}
	return in, nil
}

type demandYAML struct {
	Regions []struct {
		Name           string    `yaml:"name"`
		Jurisdiction   string    `yaml:"jurisdiction"`
		ResidencyShare float64   `yaml:"residency_share"`
		Demand         []float64 `yaml:"demand"`
		// Profile is the hardware its replicas run (default --profile's);
		// Capacity what one serves within the SLO, requests/s (default
		// --capacity).
		Profile  string  `yaml:"profile"`
		Capacity float64 `yaml:"capacity"`
	} `yaml:"regions"`
	RTTMs           map[string]float64 `yaml:"rtt_ms"`
	MaxWANRTTMs     float64            `yaml:"max_wan_rtt_ms"`
	TTFTObjectiveMs float64            `yaml:"ttft_objective_ms"`
	TTFTMs          float64            `yaml:"ttft_ms"`
}

// ParseDemandYAML reads a demand YAML file.
func ParseDemandYAML(data []byte) (Input, error) {
	if len(data) > maxDemandBytes {
		return Input{}, errors.New("demand yaml is too large")
	}
	var y demandYAML
	if err := strictyaml.Decode(data, &y); err != nil {
		return Input{}, fmt.Errorf("demand yaml: %w", err)
	}
	millis := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	if y.MaxWANRTTMs < 0 || y.TTFTObjectiveMs < 0 || y.TTFTMs < 0 || math.IsNaN(y.MaxWANRTTMs+y.TTFTObjectiveMs+y.TTFTMs) || math.IsInf(y.MaxWANRTTMs+y.TTFTObjectiveMs+y.TTFTMs, 0) {
		return Input{}, errors.New("demand yaml: max_wan_rtt_ms, ttft_objective_ms and ttft_ms must be non-negative numbers")
	}
	in := Input{RTT: map[[2]string]time.Duration{}, MaxWANRTT: millis(y.MaxWANRTTMs), Objective: millis(y.TTFTObjectiveMs), TTFT: millis(y.TTFTMs)}
	names := map[string]bool{}
	for i, r := range y.Regions {
		if r.Name == "" || len(r.Demand) != Hours || r.ResidencyShare < 0 || r.ResidencyShare > 1 {
			return Input{}, fmt.Errorf("demand yaml: regions[%d] needs a name, 24 hourly demand values and residency_share in [0, 1]", i)
		}
		reg := Region{Name: r.Name, Jurisdiction: r.Jurisdiction, ResidencyShare: r.ResidencyShare, Profile: r.Profile, Capacity: r.Capacity}
		if r.Profile != "" {
			if _, err := profile.Lookup(r.Profile); err != nil {
				return Input{}, fmt.Errorf("demand yaml: regions[%d].profile: %w", i, err)
			}
		}
		if r.Capacity < 0 || math.IsNaN(r.Capacity) || math.IsInf(r.Capacity, 0) {
			return Input{}, fmt.Errorf("demand yaml: regions[%d].capacity must be a non-negative number of requests/s", i)
		}
		if r.Capacity > 0 {
			reg.CapacitySource = "configured: the demand file"
		}
		for h, v := range r.Demand {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return Input{}, fmt.Errorf("demand yaml: regions[%d].demand[%d] must be a non-negative number", i, h)
			}
			reg.Demand[h] = v
		}
		names[r.Name] = true
		in.Regions = append(in.Regions, reg)
	}
	for pair, ms := range y.RTTMs {
		a, b, ok := strings.Cut(pair, "/")
		if !ok || !names[a] || !names[b] || ms < 0 {
			return Input{}, fmt.Errorf("demand yaml: rtt_ms key %q must be regionA/regionB with a non-negative value", pair)
		}
		in.RTT[[2]string{a, b}] = time.Duration(ms * float64(time.Millisecond))
	}
	if len(in.Regions) == 0 {
		return Input{}, errors.New("demand yaml has no regions")
	}
	return in, nil
}

// FromProxies reads each proxy's GET /v1/skywalker/demand and turns its
// per-hour counts into the average requests/s of each hour of the day: a
// proxy's days average, a region's proxies add.
func FromProxies(ctx context.Context, urls []string) (Input, error) {
	in := Input{}
	index := map[string]int{}
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(u, "/")+"/v1/skywalker/demand", nil)
		if err != nil {
			return Input{}, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return Input{}, fmt.Errorf("read demand from %s: %w", u, err)
		}
		var rep struct {
			Region string `json:"region"`
			Hours  []struct {
				Hour     time.Time `json:"hour"`
				Requests int64     `json:"requests"`
			} `json:"hours"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, maxDemandBytes)).Decode(&rep)
		resp.Body.Close()
		if err != nil || rep.Region == "" {
			return Input{}, fmt.Errorf("demand from %s: not a demand report (%v)", u, err)
		}
		i, ok := index[rep.Region]
		if !ok {
			i = len(in.Regions)
			index[rep.Region] = i
			in.Regions = append(in.Regions, Region{Name: rep.Region})
		}
		var sum [Hours]float64
		var days [Hours]int
		for _, h := range rep.Hours {
			hr := h.Hour.UTC().Hour()
			sum[hr] += float64(h.Requests)
			days[hr]++
		}
		for hr := range Hours {
			if days[hr] > 0 {
				in.Regions[i].Demand[hr] += sum[hr] / float64(days[hr]) / 3600
			}
		}
	}
	if len(in.Regions) == 0 {
		return Input{}, errors.New("plan: no proxies given")
	}
	return in, nil
}

// FromTrace stretches a trace's arrival pattern over a day for each
// region: the trace's span is cut into 24 equal buckets, bucket b becoming
// hour b of the region's local day (so regions in other time zones see the
// same pattern shifted), and each hour's demand is the bucket's request
// count over the hour, times scale.
func FromTrace(records []workload.TraceRecord, regions []RegionTZ, scale float64) (Input, error) {
	if len(records) == 0 || len(regions) == 0 {
		return Input{}, errors.New("plan: a trace and regions are needed")
	}
	if scale <= 0 {
		scale = 1
	}
	span := records[len(records)-1].At
	var counts [Hours]float64
	for _, r := range records {
		b := 0
		if span > 0 {
			b = min(int(float64(r.At)/float64(span)*Hours), Hours-1)
		}
		counts[b]++
	}
	in := Input{}
	for _, reg := range regions {
		r := Region{Name: reg.Name, Jurisdiction: reg.Jurisdiction}
		for h := range Hours {
			local := ((h+int(math.Round(reg.UTCOffset)))%Hours + Hours) % Hours
			r.Demand[h] = counts[local] / 3600 * scale
		}
		in.Regions = append(in.Regions, r)
	}
	return in, nil
}

// RegionTZ is a region and its time zone, for FromTrace.
type RegionTZ struct {
	Name, Jurisdiction string
	UTCOffset          float64
}
