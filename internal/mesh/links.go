package mesh

import (
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Links emulates WAN delay between regions for mesh nodes running in one
// process (tests and the one-machine demo): every packet a node sends is
// held for half the RTT between its region and the receiver's, and every
// stream connection waits one RTT to open, as a TCP handshake would. The
// kernel's netem is not needed (and not available everywhere).
type Links struct {
	mu     sync.RWMutex
	region map[string]string // gossip address → region
	rtt    map[[2]string]time.Duration
}

// NewLinks returns an emulator with no delay on any link.
func NewLinks() *Links {
	return &Links{region: map[string]string{}, rtt: map[[2]string]time.Duration{}}
}

// SetRTT sets the round-trip time between two regions (both directions).
func (l *Links) SetRTT(a, b string, rtt time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rtt[[2]string{a, b}] = rtt
	l.rtt[[2]string{b, a}] = rtt
}

// RTT returns the emulated round-trip time between two regions.
func (l *Links) RTT(a, b string) time.Duration {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.rtt[[2]string{a, b}]
}

func (l *Links) oneWay(from, toAddr string) time.Duration {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.rtt[[2]string{from, l.region[toAddr]}] / 2
}

// Transport returns a loopback transport for a node of region, bound to a
// free port, whose traffic is delayed by the emulated links.
func (l *Links) Transport(region string) (memberlist.Transport, error) {
	return l.TransportAt(region, "127.0.0.1", 0)
}

// TransportAt is Transport bound to host:port (0: a free port): what
// `skywalker serve --emulate-wan` uses, one process per region. The
// regions of peers in other processes are learned as they join the mesh
// (Learn).
func (l *Links) TransportAt(region, host string, port int) (memberlist.Transport, error) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{host}, BindPort: port, Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		return nil, fmt.Errorf("mesh: emulated-WAN transport on %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	l.Learn(net.JoinHostPort(host, strconv.Itoa(nt.GetAutoBindPort())), region)
	return &delayTransport{Transport: nt, links: l, region: region}, nil
}

// Learn records that the mesh node at addr (host:port) is in region.
func (l *Links) Learn(addr, region string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.region[addr] = region
}

// delayTransport delays a NetTransport's outbound traffic. It embeds only
// the Transport interface, so memberlist addresses it through WriteTo and
// DialTimeout, which are the two places delay is added.
type delayTransport struct {
	memberlist.Transport
	links  *Links
	region string
}

func (t *delayTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	d := t.links.oneWay(t.region, addr)
	if d <= 0 {
		return t.Transport.WriteTo(b, addr)
	}
	buf := append([]byte(nil), b...)
	time.AfterFunc(d, func() { _, _ = t.Transport.WriteTo(buf, addr) })
	return time.Now(), nil
}

func (t *delayTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if d := 2 * t.links.oneWay(t.region, addr); d > 0 {
		time.Sleep(min(d, timeout))
	}
	return t.Transport.DialTimeout(addr, timeout)
}
