// Package datalocality is gpudra's kube-scheduler Score plugin for data: it ranks the
// nodes that passed filtering by the share of the pod's datasets they cache (package
// locality says which datasets and which nodes). It never filters: a node without the
// data is still a node the pod may run on.
package datalocality
