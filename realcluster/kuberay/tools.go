//go:build tools

// Package kuberay pins KubeRay's operator in a module of its own: v1.6.2 is built against
// controller-runtime v0.22, which Kueue v0.19.2's v0.24 (in ../go.mod) would replace and break.
package kuberay

import _ "github.com/ray-project/kuberay/ray-operator"
