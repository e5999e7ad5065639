package region

import "slices"

// What a region believes of its replicas' LoRA adapters. vLLM keeps at
// most max_loras adapters on the GPU and loads another over the least
// recently used idle one, which delays the whole batch; its metrics name
// only the adapters of requests running or waiting
// (vllm:lora_requests_info), not those resident. So residency is learned
// from routing history — the adapters this node sent a replica, most
// recent last, as many as it has slots — and from the adapters its engine
// reports running (certainly resident). A request whose adapter is
// believed resident on a replica pays no load there; one whose adapter is
// not pays AdapterLoad, and cannot start at all while every slot serves
// requests of other adapters in flight (the engine would make it wait
// inside, where it can no longer go elsewhere: selective pushing holds it
// in the balancer instead).

// DefaultMaxLoRAs is how many adapters a replica is believed to hold when
// its engine does not say (vllm:lora_requests_info's max_lora): enough to
// believe recent ones resident, never used to refuse a dispatch.
const DefaultMaxLoRAs = 4

// adapterState is one replica's adapters as the region believes them.
type adapterState struct {
	recent   []string       // adapters sent or seen running, least recent first
	inFlight map[string]int // this node's requests in flight per adapter
}

// slots is how many adapters rp holds at once, and whether its engine
// said so.
func (rp *replica) loraSlots() (int, bool) {
	if n := rp.metrics.MaxLoRAs; n > 0 {
		return n, true
	}
	return DefaultMaxLoRAs, false
}

// touch records that adapter was used on rp now.
func (rp *replica) touchAdapter(adapter string) {
	a := &rp.adapters
	if i := slices.Index(a.recent, adapter); i >= 0 {
		a.recent = slices.Delete(a.recent, i, i+1)
	}
	a.recent = append(a.recent, adapter)
	if slots, _ := rp.loraSlots(); len(a.recent) > 4*slots { // remember a little more than the slots
		a.recent = slices.Delete(a.recent, 0, len(a.recent)-4*slots)
	}
}

// adapterResident reports whether adapter is believed resident on rp: it
// is among the slots' worth most recently used there.
func (rp *replica) adapterResident(adapter string) bool {
	slots, _ := rp.loraSlots()
	recent := rp.adapters.recent
	return slices.Contains(recent[max(len(recent)-slots, 0):], adapter)
}

// adapterBlocked reports whether a request of adapter could not start on
// rp now: its adapter is not resident, the engine says how many slots it
// has, and this node's requests in flight there use that many other
// adapters.
func (rp *replica) adapterBlocked(adapter string) bool {
	slots, known := rp.loraSlots()
	if !known || rp.adapters.inFlight[adapter] > 0 {
		return false
	}
	return len(rp.adapters.inFlight) >= slots
}

// adapterDispatched books a request of adapter sent to rp.
func (rp *replica) adapterDispatched(adapter string) {
	if adapter == "" {
		return
	}
	rp.touchAdapter(adapter)
	if rp.adapters.inFlight == nil {
		rp.adapters.inFlight = map[string]int{}
	}
	rp.adapters.inFlight[adapter]++
}

// adapterEnded books the end of a request of adapter on rp.
func (rp *replica) adapterEnded(adapter string) {
	if adapter == "" {
		return
	}
	if n := rp.adapters.inFlight[adapter]; n > 1 {
		rp.adapters.inFlight[adapter] = n - 1
	} else {
		delete(rp.adapters.inFlight, adapter)
	}
}
