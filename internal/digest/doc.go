// Package digest summarizes a region's cached prefix blocks as a Bloom filter
// (bits-and-blooms/bloom/v3) small enough to gossip, and answers the one
// question peers ask of it: how many leading blocks of this request does
// that region probably hold.
//
// A Digest is built from the region's prefix index, versioned by a
// generation number, merged across a region's proxies, and encoded in a
// small, bounded binary format whose decoder never trusts its input. No
// clock, no I/O.
package digest
