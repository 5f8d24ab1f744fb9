//go:build tools

// Package tools pins provider-helm, which the lab runs as a process. Its
// own module: it needs crossplane-runtime v2.2 and Helm's Kubernetes 0.35
// libraries, which the lab module's Crossplane v2.3 cannot share. Helm's
// CLI (the same Helm) renders Crossplane's chart for its RBAC.
package tools

import (
	_ "github.com/crossplane-contrib/provider-helm/cmd/provider"
	_ "helm.sh/helm/v3/cmd/helm"
)
