// Package mps runs the MPS control daemons of the kubelet plugin's claims: as processes
// of the plugin (Process), in pods of their own (Pods), or as files on a simulated node
// (Simulated), all through Control. It also makes the claims' MPS directories: their
// modes, and the shm tmpfs that is /dev/shm to a claim's containers and its daemon.
// It knows nothing of the plugin's checkpoint or locks; the plugin's core drives it.
package mps
