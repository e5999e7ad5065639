// Package helm holds the tests of the Helm chart in ./skywalker: it is a
// module of its own so that Helm and the Kubernetes API types stay out of
// the product's build. The tests render the chart with every example
// values file, decode each object strictly into the k8s.io/api types
// (kubeconform cannot fetch schemas offline), and check each proxy's
// environment with the binary's own configuration parser.
package helm
