// Package fragmentation is gpudra's kube-scheduler Score plugin: it ranks the nodes that
// passed filtering by how little placing the pod there fragments their GPUs, with the
// same policy code the trace simulator (`gpudra sim`) measures (topology/placement). It
// reads GPUs and their allocations from the framework's shared DRA manager, so it sees
// exactly the devices and claims the DynamicResources plugin allocates from.
package fragmentation
