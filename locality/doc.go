// Package locality knows where data is: which datasets a pod reads (Fluid volumes it
// mounts, or the gpudra.dev/datasets annotation) and which nodes cache them (Fluid's
// fluid.io/s-… node labels, or gpudra's dataset.gpudra.dev/… labels set by an admin or a
// cache agent). It is read only and pure: volumes come through listers, and a cluster
// without Fluid is a cluster whose pods name their datasets by annotation.
package locality
