// Package plan computes reserved capacity for multi-region demand: how many
// replicas each region needs when it serves only itself (the sum of
// regional peaks) against when regions share (the peak of the summed
// demand), and where to place the shared reservation so that every hour's
// demand is served, only over links the router's reach rule allows (the
// RTT plus a typical TTFT within the objective, under the operator's WAN
// cap: policy.FitsObjective), never across residency boundaries, with the least RTT-weighted cross-region traffic —
// a linear program solved with gonum's optimize/convex/lp.
//
// In money (cost.go): each region's hardware (its profile's GPUs, its
// capacity per replica, measured per profile) and prices (internal/price)
// make a second LP choose, per region and hour, reserved replicas (paid
// all day) and on-demand or spot top-up (paid by the hour), the cheapest
// fleet under the same rules, compared with region-isolated reservation,
// reserving the mean and renting the rest, and the pooling bound.
//
// Planning is pure arithmetic over demand curves; verification by
// simulation (the command's --verify, and Replay of a cost plan's fleet)
// drives internal/sim.
package plan
