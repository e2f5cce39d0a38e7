//go:build tools

// Package realcluster pins the upstream programs the real-stack harness starts. Nothing here is
// compiled; the blank imports keep `go mod tidy` recording every module those mains need.
package realcluster

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
