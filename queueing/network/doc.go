// Package network keeps the cluster's view of where nodes sit in the network consistent:
// it labels nodes with their block, rack and top-of-rack switch, and the switches'
// oversubscription, from a topology file (a ConfigMap) or leaves existing labels as the
// source, and keeps a Kueue Topology (block → rack → tor → hostname) and a topology-aware
// ResourceFlavor in sync with those labels.
package network
