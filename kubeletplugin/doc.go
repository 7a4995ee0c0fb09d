// Package kubeletplugin is gpudra's DRA kubelet plugin: it publishes the node's
// ResourceSlices from the device model and prepares and unprepares allocated claims
// for the kubelet, built on k8s.io/dynamic-resource-allocation/kubeletplugin.
package kubeletplugin
