//go:build tools

// Package tools pins the upstream controllers the lab runs as processes.
package tools

import (
	_ "github.com/crossplane/crossplane/v2/cmd/crossplane"
	_ "github.com/google/go-containerregistry/cmd/crane"
	_ "github.com/metal3-io/baremetal-operator"
	_ "github.com/metal3-io/cluster-api-provider-metal3"
	_ "github.com/metal3-io/ip-address-manager"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/cluster-api"
	_ "sigs.k8s.io/cluster-api/bootstrap/kubeadm"
	_ "sigs.k8s.io/cluster-api/controlplane/kubeadm"
	_ "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/server"
)
