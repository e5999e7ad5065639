// Package arch holds no code: its tests hold the rules of the product's
// shape that prose would let drift — which layer may import which, how
// many methods the region core exports, where the proxy's router lock is
// taken, that the docs list every package and proxy file, and that the
// README's test command is what CI runs.
package arch
