// Package devcluster runs a local Kubernetes control plane without Docker: etcd and
// kube-apiserver (through controller-runtime's envtest), kube-controller-manager and
// kube-scheduler as child processes, a node agent that runs bound Pods as local
// processes on loopback addresses, and a TCP proxy that makes Services reachable from the
// host. `hookkeeper dev` and the end-to-end tests are built on it.
package devcluster
