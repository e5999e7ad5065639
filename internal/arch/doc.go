// Package arch holds no code: its tests hold the rules of the product's
// shape that prose would let drift — which layer may import which, and
// how many methods the region core exports.
package arch
