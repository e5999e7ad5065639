package mesh

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"skywalker/internal/lograte"
	"skywalker/internal/region"
)

// Config configures one mesh node. DefaultConfig gives the defaults.
type Config struct {
	Region       string // this node's region, e.g. "us-east"
	NodeID       string // unique in the cluster; default region + host:port
	Jurisdiction string // for residency, e.g. "us"
	APIAddr      string // the proxy's HTTP address peers forward to
	Version      string

	BindAddr      string // gossip listen address; default 0.0.0.0
	BindPort      int    // gossip port; default 7946 (0 picks a free port)
	AdvertiseAddr string
	AdvertisePort int

	// Preset is memberlist's timing preset: "wan" (default: regions are
	// far apart), "lan", or "local" (tests and the one-machine demo, with
	// probe timeouts that still tolerate emulated WAN delays).
	Preset string

	// Keys: the first is the primary gossip key (base64 of 16, 24 or 32
	// bytes, from SKYWALKER_GOSSIP_KEY), the rest are accepted for
	// rotation. Without keys the mesh refuses to start unless Insecure.
	Keys     []string
	Insecure bool
	// Label is the cluster label: packets from a mesh with another label
	// are dropped, so two meshes on one network never merge. Default
	// "skywalker".
	Label string

	// Control holds the timing and the WAN gate's thresholds; default
	// region.DefaultControlPlane(), shared with the proxy and the simulator.
	Control region.ControlPlane

	// GossipBudget bounds the bytes per second this node spends on load
	// summaries and digest changes (whole digests, sent once to a node that
	// asks, are not counted). Default DefaultGossipBudget; negative is
	// unlimited.
	GossipBudget int

	// Incarnation identifies this process to its peers: a node restarted
	// under the same id is heard at once, whatever the old process's
	// sequence numbers reached, because its incarnation is higher.
	// Default the start time in nanoseconds.
	Incarnation uint64

	// Transport replaces memberlist's network transport (tests and the
	// demo wrap it to emulate WAN delay); nil uses a real NetTransport.
	Transport memberlist.Transport
	Logger    *slog.Logger
}

// DefaultGossipBudget is 50 KB/s per node.
const DefaultGossipBudget = 50_000

// DefaultConfig returns the defaults for a node of region name.
func DefaultConfig(name string) Config {
	return Config{Region: name, BindAddr: "0.0.0.0", BindPort: 7946, Preset: "wan", Label: "skywalker",
		Control: region.DefaultControlPlane(), GossipBudget: DefaultGossipBudget}
}

// ParseKey decodes a base64 gossip key and checks its length.
func ParseKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("gossip key is not base64: %w", err)
	}
	switch len(key) {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("gossip key is %d bytes; want 16, 24 or 32 (AES-128/192/256)", len(key))
	}
	if distinct := distinctBytes(key); distinct < MinKeyDistinctBytes {
		return nil, fmt.Errorf("gossip key has only %d distinct byte values (all zero, a repeated word?): make one with `head -c 32 /dev/urandom | base64`", distinct)
	}
	return key, nil
}

// MinKeyDistinctBytes refuses keys no random generator makes: a random
// 16-byte key has fewer than 8 distinct byte values with a probability
// below 10^-9; all-zero keys, repeated bytes and words typed by hand have
// far fewer.
const MinKeyDistinctBytes = 8

func distinctBytes(b []byte) int {
	var seen [256]bool
	n := 0
	for _, c := range b {
		if !seen[c] {
			seen[c], n = true, n+1
		}
	}
	return n
}

func (c *Config) validate() error {
	var errs []error
	if c.Region == "" {
		errs = append(errs, errors.New("mesh: region is required"))
	}
	if len(c.Keys) == 0 && !c.Insecure {
		errs = append(errs, errors.New("mesh: no gossip key: set SKYWALKER_GOSSIP_KEY (base64 of 16, 24 or 32 bytes), or run insecure explicitly for development"))
	}
	for i, k := range c.Keys {
		if _, err := ParseKey(k); err != nil {
			errs = append(errs, fmt.Errorf("mesh: key %d: %w", i, err))
		}
	}
	switch c.Preset {
	case "wan", "lan", "local":
	default:
		errs = append(errs, fmt.Errorf("mesh: preset must be wan, lan or local, not %q", c.Preset))
	}
	cp := c.Control
	if cp.MaxLoss < 0 || cp.MaxLoss > 1 {
		errs = append(errs, errors.New("mesh: max loss must be in [0, 1]"))
	}
	if cp.LoadInterval <= 0 || cp.LoadCheck <= 0 || cp.DigestInterval <= 0 || cp.ProbeInterval <= 0 || cp.MaxDataAge <= 0 ||
		cp.MaxWANRTT <= 0 || cp.RTTAlpha <= 0 || cp.RTTAlpha > 1 || cp.ReopenSamples <= 0 {
		errs = append(errs, fmt.Errorf("mesh: control-plane intervals, thresholds and the RTT weight must be positive: %+v", cp))
	}
	return errors.Join(errs...)
}

// memberlistConfig builds memberlist's configuration from the preset.
func (c *Config) memberlistConfig() (*memberlist.Config, error) {
	var mc *memberlist.Config
	switch c.Preset {
	case "lan":
		mc = memberlist.DefaultLANConfig()
	case "local":
		mc = memberlist.DefaultLANConfig()
		mc.ProbeInterval = 500 * time.Millisecond
		mc.ProbeTimeout = 450 * time.Millisecond // above the slowest emulated RTT (230 ms)
		mc.GossipInterval = 100 * time.Millisecond
		mc.SuspicionMult = 3
		mc.PushPullInterval = 5 * time.Second
		mc.TCPTimeout = 2 * time.Second
	default:
		mc = memberlist.DefaultWANConfig()
	}
	mc.Name = c.NodeID
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	mc.Label = c.Label
	mc.Transport = c.Transport
	mc.LogOutput = newMemberlistLog(c.Logger, time.Now)
	if len(c.Keys) > 0 {
		var keys [][]byte
		for _, k := range c.Keys {
			key, _ := ParseKey(k) // validated
			keys = append(keys, key)
		}
		ring, err := memberlist.NewKeyring(keys, keys[0])
		if err != nil {
			return nil, fmt.Errorf("mesh: keyring: %w", err)
		}
		mc.Keyring = ring
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	return mc, nil
}

// memberlistLog sends memberlist's log lines to slog: debug and info at
// debug level, warnings and errors at their own levels but at most one of
// a kind per WarnEvery (a busy machine makes memberlist refute suspicions
// and retry pings by the hundred), with the count of those held back.
type memberlistLog struct {
	log   *slog.Logger
	limit *lograte.Limiter
}

// WarnEvery is how often one kind of memberlist warning is logged.
const WarnEvery = 30 * time.Second

func newMemberlistLog(log *slog.Logger, now func() time.Time) *memberlistLog {
	return &memberlistLog{log: log, limit: lograte.New(WarnEvery, now)}
}

func (w *memberlistLog) Write(p []byte) (int, error) {
	level, text := parseMemberlistLine(string(p))
	if level < slog.LevelWarn {
		w.log.Debug(text, "component", "memberlist")
		return len(p), nil
	}
	kind := text
	// The kind is the text before its first detail, so that no string a
	// sender chooses (a label, a node name, an address) makes a new kind:
	// "Refuting a suspect message (from: x)", "discarding packet with
	// unacceptable label "x": from=…" → their kinds.
	if i := strings.IndexAny(kind, ":([\"'="); i > 0 {
		kind = kind[:i]
	}
	ok, suppressed := w.limit.Allow(kind)
	if !ok {
		return len(p), nil
	}
	attrs := []any{"component", "memberlist"}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	w.log.Log(context.Background(), level, text, attrs...)
	return len(p), nil
}

// parseMemberlistLine reads "2026/12/02 00:11:33 [WARN] memberlist: text"
// into its level and text.
func parseMemberlistLine(line string) (slog.Level, string) {
	line = strings.TrimSpace(line)
	level := slog.LevelDebug
	for _, t := range []struct {
		tag   string
		level slog.Level
	}{{"[ERR]", slog.LevelError}, {"[WARN]", slog.LevelWarn}, {"[INFO]", slog.LevelInfo}, {"[DEBUG]", slog.LevelDebug}} {
		if i := strings.Index(line, t.tag); i >= 0 {
			level, line = t.level, strings.TrimSpace(line[i+len(t.tag):])
			break
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	return level, line
}
