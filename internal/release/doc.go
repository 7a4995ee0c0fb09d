// Package release makes a gpudra release without a container engine or a network: the
// binaries stamped with the release's version, one image per server binary (gpudra-kubelet-
// plugin with the C libraries it loads, gpudra-controller and gpudra-scheduler on a static
// base), an SPDX SBOM per image and the Helm chart packaged with the same version. The
// repository's Dockerfile describes the same images for builds with a container engine.
package release
