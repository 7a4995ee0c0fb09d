// Package lab runs a real Kubernetes 1.37 cluster on one machine for demos and end-to-end
// tests: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1 with a
// generated PKI and RBAC on, kwok simulating the nodes, Kueue with its webhooks on loopback, and
// one real gpudra-kubelet-plugin per node publishing the ResourceSlices of a simulated GPU server.
//
// A lab lives in a state folder (default <repo>/.lab, or $GPUDRA_LAB_DIR) holding its PKI,
// kubeconfigs, one log per component and the PIDs of the processes it started; Down stops
// exactly those processes and removes the folder. The cluster's shape comes from a lab file
// (deployments/lab/lab.yaml by default).
package lab
