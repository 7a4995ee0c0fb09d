// Package config is gpudra's opaque device configuration API, gpu.gpudra.dev/v1alpha1:
// the GpuConfig and MigConfig kinds that DeviceClasses and ResourceClaims carry, their
// strict decoding, defaults (Normalize), validation with field paths, and the merge of
// class and claim configs in Kubernetes' precedence order. It imports no kubelet or
// client code, so the kubelet plugin and the controller's admission webhook share it.
package config
