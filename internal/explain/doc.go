// Package explain replays one routing situation — a request arriving at a
// region, and the view its balancer has — through every policy and tabulates
// what each decides. It backs `skywalker explain`, the quickest way to see
// the decision core at work and to ask "what would SkyWalker do if...".
//
// A situation is a small YAML document (see examples/worked-example.yaml);
// Parse rejects anything malformed with an error naming the field.
package explain
