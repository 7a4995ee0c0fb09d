// Package podrequests computes what a pod asks of a node the way Kueue counts it.
package podrequests
