//go:build tools

// Package tools pins the upstream programs the end-to-end tests run: the
// Crossplane CLI (render, alpha render op, beta validate) and a real
// CRD-serving Kubernetes API server. Nothing here is MetalPlane code.
package tools

import (
	_ "github.com/crossplane/crossplane/v2/cmd/crank"
	_ "k8s.io/apiextensions-apiserver"
)
