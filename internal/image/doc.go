// Package image writes container images without a container engine or a registry: an
// image's root file system as one layer built from files in memory, the C libraries a cgo
// binary loads copied from this machine, and a minimal base for static binaries (CA
// certificates and a non-root user). The lab imports what it writes into its nodes'
// containerd; the release writes the same images for a registry.
package image
