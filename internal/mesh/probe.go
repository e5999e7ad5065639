package mesh

import (
	"net"
	"time"
)

// probe pings one live node of every peer region (called each
// ProbeInterval), so every link has RTT and loss samples even when
// memberlist's own random probes go elsewhere.
func (m *Mesh) probe() {
	m.mu.Lock()
	names := m.table.ProbeTargets()
	targets := make([]probeTarget, 0, len(names))
	for _, name := range names {
		n, ok := m.members[name]
		if !ok {
			continue
		}
		targets = append(targets, probeTarget{name, m.table.NodeRegion(name), &net.UDPAddr{IP: n.Addr, Port: int(n.Port)}})
	}
	m.mu.Unlock()
	for _, t := range targets {
		rtt, err := m.ml.Ping(t.name, t.addr)
		m.observe(t.region, rtt, err == nil)
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
