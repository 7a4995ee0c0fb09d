// Package topology holds gpudra's pure topology logic: the NVLink graph inside a
// node (cliques, domains, the groups a node publishes) and, later, the network
// model across nodes and placement scoring. It never talks to NVML or the API server.
package topology
