//go:build tools

// Package tools pins provider-kubernetes, which the lab runs as a process.
// Its own module: v1.3.0 is the last release on Kubernetes 0.35, it needs
// crossplane-runtime v2.3.3, which provider-helm v1.3.0 does not compile
// against, and it would move the lab module's kube-openapi past what
// Kubernetes 1.35 pins. github.com/nebius/gosdk is raised to v0.2.29: the
// module proxy serves no archive of the v0.2.28 it asks for.
package tools

import _ "github.com/crossplane-contrib/provider-kubernetes/cmd/provider"
