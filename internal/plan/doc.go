// Package plan computes reserved capacity for multi-region demand: how many
// replicas each region needs when it serves only itself (the sum of
// regional peaks) against when regions share (the peak of the summed
// demand), and where to place the shared reservation so that every hour's
// demand is served, only over links the router's reach rule allows (the
// RTT plus a typical TTFT within the objective, under the operator's WAN
// cap: policy.FitsObjective), never across residency boundaries, with the least RTT-weighted cross-region traffic —
// a linear program solved with gonum's optimize/convex/lp.
//
// Planning is pure arithmetic over demand curves; verification by
// simulation lives in verify.go and drives internal/sim.
package plan
