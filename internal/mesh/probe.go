package mesh

import (
	"net"
	"slices"
	"time"
)

// probe pings one live node of every peer region (called each
// ProbeInterval), so every link has RTT and loss samples even when
// memberlist's own random probes go elsewhere. The regions are probed at
// once, each in its own goroutine, as the simulator probes them: a lossy
// region's probe waits out memberlist's timeout (3 s on the WAN preset)
// without delaying any other region's samples or gate. A region whose
// previous probe is still out is skipped this round.
func (m *Mesh) probe() {
	m.mu.Lock()
	ping := m.ping
	names := m.table.ProbeTargets()
	targets := make([]probeTarget, 0, len(names))
	for _, name := range names {
		n, ok := m.members[name]
		region := m.table.NodeRegion(name)
		if !ok || m.probing[region] {
			continue
		}
		m.probing[region] = true
		targets = append(targets, probeTarget{name, region, &net.UDPAddr{IP: slices.Clone(n.Addr), Port: int(n.Port)}})
	}
	m.mu.Unlock()
	for _, t := range targets {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			rtt, err := ping(t.name, t.addr)
			m.mu.Lock()
			delete(m.probing, t.region)
			m.mu.Unlock()
			m.observe(t.region, rtt, err == nil)
		}()
	}
}

type probeTarget struct {
	name, region string
	addr         net.Addr
}

// observe folds one probe of the link to region into its gate, and logs
// the gate opening or closing.
func (m *Mesh) observe(region string, rtt time.Duration, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, changed := m.table.ObserveProbe(region, rtt, ok, time.Now())
	if changed {
		m.log.Info("wan gate", "peer", region, "open", g.Open(), "reason", g.Reason(), "rtt", g.RTT().Round(time.Millisecond).String())
	}
}
