// Command workload stands in for the servers' operating system in the lab:
// once BMO (test mode) reports a claimed BareMetalHost provisioned, it
// "boots" the node. The node registers with the labels its KubeadmConfig
// gives the kubelet, and a control-plane node serves the workload cluster's
// API (Cluster API's in-memory API server, as CAPM3's scale tests use) at
// the Cluster's control plane endpoint, inside the lab's network namespace.
// When the Machine goes, the node and its control-plane members go too.
//
// It is lab tooling, not MetalPlane: it only reads the management cluster
// and serves the simulated workload API.
package main

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	inmemoryruntime "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime"
	inmemorymanager "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime/manager"
	"sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/server"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Annotation names the in-memory etcd reads (its cloud API package).
const (
	etcdClusterID = "etcd.inmemory.infrastructure.cluster.x-k8s.io/cluster-id"
	etcdMemberID  = "etcd.inmemory.infrastructure.cluster.x-k8s.io/member-id"
	etcdLeader    = "etcd.inmemory.infrastructure.cluster.x-k8s.io/leader-from"
	hostAnnot     = "metal3.io/BareMetalHost"
	requeue       = 2 * time.Second
)

type booted struct {
	wcl, node string
	cp        bool
}

type reconciler struct {
	client.Client
	memory inmemoryruntime.Manager

	mu    sync.Mutex
	muxes map[string]*server.WorkloadClustersMux // by endpoint host
	wcls  map[string]*server.WorkloadClustersMux // by workload cluster
	nodes map[types.NamespacedName]booted        // by Machine
}

func main() {
	healthAddr := flag.String("health-addr", "127.0.0.1:9610", "readiness probe address")
	flag.Parse()
	ctrl.SetLogger(zap.New())

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = clusterv1.AddToScheme(scheme)
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: *healthAddr,
	})
	if err != nil {
		fail(err)
	}
	_ = mgr.AddReadyzCheck("ping", healthz.Ping)

	memScheme := runtime.NewScheme()
	_ = corev1.AddToScheme(memScheme)
	_ = appsv1.AddToScheme(memScheme)
	_ = rbacv1.AddToScheme(memScheme)
	_ = coordinationv1.AddToScheme(memScheme)
	memory := inmemorymanager.New(memScheme)
	ctx := ctrl.SetupSignalHandler()
	if err := memory.Start(ctx); err != nil {
		fail(err)
	}

	r := &reconciler{
		Client: mgr.GetClient(),
		memory: memory,
		muxes:  map[string]*server.WorkloadClustersMux{},
		wcls:   map[string]*server.WorkloadClustersMux{},
		nodes:  map[types.NamespacedName]booted{},
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&clusterv1.Machine{}).Named("workload").Complete(r); err != nil {
		fail(err)
	}
	if err := mgr.Start(ctx); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &clusterv1.Machine{}
	if err := r.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.shutdown(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !m.DeletionTimestamp.IsZero() {
		// The Machine controller drains and deletes the Node itself; the
		// node's members leave once its host is deprovisioning.
		return ctrl.Result{RequeueAfter: requeue}, r.shutdownIfHostGone(ctx, m)
	}
	cluster := &clusterv1.Cluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ClusterName}, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ep := cluster.Spec.ControlPlaneEndpoint
	if ep.Host == "" || ep.Port == 0 {
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	bmh, err := r.host(ctx, m)
	if err != nil || bmh == nil {
		return ctrl.Result{RequeueAfter: requeue}, err
	}
	state, _, _ := unstructured.NestedString(bmh.Object, "status", "provisioning", "state")
	if state != "provisioned" {
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	wcl := m.Namespace + "/" + m.Spec.ClusterName
	mux, err := r.listener(ep.Host, ep.Port, wcl)
	if err != nil {
		return ctrl.Result{}, err
	}
	nodeName, labels, err := r.registration(ctx, m, bmh)
	if err != nil {
		return ctrl.Result{RequeueAfter: requeue}, err
	}
	mem := r.memory.GetResourceGroup(wcl).GetClient()
	cp := util.IsControlPlaneMachine(m)
	if cp {
		if err := r.controlPlane(ctx, mem, mux, cluster, wcl, nodeName, m); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := kubelet(ctx, mem, nodeName, labels); err != nil {
		return ctrl.Result{}, err
	}
	r.mu.Lock()
	r.nodes[req.NamespacedName] = booted{wcl: wcl, node: nodeName, cp: cp}
	r.mu.Unlock()
	// The kubelet renews its lease; KCP and the Machine controller read it.
	return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
}

// host is the BareMetalHost CAPM3 claimed for the Machine, or nil.
func (r *reconciler) host(ctx context.Context, m *clusterv1.Machine) (*unstructured.Unstructured, error) {
	ref := m.Spec.InfrastructureRef
	m3m := &unstructured.Unstructured{}
	m3m.SetGroupVersionKind(schema.GroupVersionKind{Group: ref.APIGroup, Version: "v1beta2", Kind: ref.Kind})
	if err := r.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, m3m); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	nsName := m3m.GetAnnotations()[hostAnnot]
	ns, name, ok := strings.Cut(nsName, "/")
	if !ok {
		return nil, nil
	}
	bmh := &unstructured.Unstructured{}
	bmh.SetGroupVersionKind(schema.GroupVersionKind{Group: "metal3.io", Version: "v1alpha1", Kind: "BareMetalHost"})
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, bmh); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return bmh, nil
}

// registration is what the kubelet registers as: the node name and labels
// of the Machine's KubeadmConfig, with the metadata cloud-init would give.
func (r *reconciler) registration(ctx context.Context, m *clusterv1.Machine, bmh *unstructured.Unstructured) (string, map[string]string, error) {
	ref := m.Spec.Bootstrap.ConfigRef
	cfg := &unstructured.Unstructured{}
	cfg.SetGroupVersionKind(schema.GroupVersionKind{Group: ref.APIGroup, Version: "v1beta2", Kind: ref.Kind})
	if err := r.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, cfg); err != nil {
		return "", nil, err
	}
	meta := map[string]string{
		"{{ ds.meta_data.uuid }}":           string(bmh.GetUID()),
		"{{ ds.meta_data.name }}":           m.Name,
		"{{ ds.meta_data.local_hostname }}": m.Name,
		"{{ ds.meta_data.providerid }}":     "",
	}
	fill := func(s string) string {
		for k, v := range meta {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	name, labels := m.Name, map[string]string{}
	for _, section := range []string{"initConfiguration", "joinConfiguration"} {
		reg, found, _ := unstructured.NestedMap(cfg.Object, "spec", section, "nodeRegistration")
		if !found {
			continue
		}
		if n, ok := reg["name"].(string); ok && n != "" && !strings.Contains(fill(n), "{{") {
			name = fill(n)
		}
		args, _ := reg["kubeletExtraArgs"].([]any)
		for _, a := range args {
			arg, _ := a.(map[string]any)
			if arg["name"] != "node-labels" {
				continue
			}
			v, _ := arg["value"].(string)
			for _, kv := range strings.Split(fill(v), ",") {
				if k, val, ok := strings.Cut(kv, "="); ok && !strings.Contains(val, "{{") {
					labels[k] = val
				}
			}
		}
	}
	return name, labels, nil
}

// listener serves the workload API at host:port, adding host to the
// namespace's loopback (the node's address, reachable only in the lab).
func (r *reconciler) listener(host string, port int32, wcl string) (*server.WorkloadClustersMux, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if mux, ok := r.wcls[wcl]; ok {
		return mux, nil
	}
	mux, ok := r.muxes[host]
	if !ok {
		out, err := exec.Command("ip", "addr", "replace", host+"/32", "dev", "lo").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("ip addr replace %s: %v: %s", host, err, out)
		}
		mux, err = server.NewWorkloadClustersMux(r.memory, host, server.CustomPorts{MinPort: port, MaxPort: port})
		if err != nil {
			return nil, err
		}
		r.muxes[host] = mux
	}
	r.memory.AddResourceGroup(wcl)
	if _, err := mux.InitWorkloadClusterListenerWithPort(wcl, port); err != nil {
		return nil, err
	}
	if err := mux.RegisterResourceGroup(wcl, wcl); err != nil {
		return nil, err
	}
	r.wcls[wcl] = mux
	return mux, nil
}

func pod(component, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceSystem,
			Name:      component + "-" + node,
			Labels:    map[string]string{"component": component, "tier": "control-plane"},
		},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

func create(ctx context.Context, c inmemoryruntime.Client, o client.Object) error {
	if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
	}
	return nil
}

// controlPlane starts what kubeadm init/join starts on a control-plane
// node: etcd (a member of the cluster's etcd), the API server, the
// scheduler and controller manager, and kubeadm's cluster objects.
func (r *reconciler) controlPlane(ctx context.Context, mem inmemoryruntime.Client, mux *server.WorkloadClustersMux, cluster *clusterv1.Cluster, wcl, node string, m *clusterv1.Machine) error {
	etcd := pod("etcd", node)
	if err := mem.Get(ctx, client.ObjectKeyFromObject(etcd), etcd); apierrors.IsNotFound(err) {
		clusterID, leader := "", true
		pods := &corev1.PodList{}
		if err := mem.List(ctx, pods, client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels{"component": "etcd"}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			clusterID = p.Annotations[etcdClusterID]
			leader = false
		}
		if clusterID == "" {
			clusterID = fmt.Sprint(rand.Uint32N(1<<31) + 1)
		}
		etcd.Annotations = map[string]string{etcdClusterID: clusterID, etcdMemberID: fmt.Sprint(rand.Uint32N(1<<31) + 1)}
		if leader {
			etcd.Annotations[etcdLeader] = time.Now().Format(time.RFC3339)
		}
		if err := create(ctx, mem, etcd); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(cluster)
	if !mux.HasEtcdMember(wcl, etcd.Name) {
		cert, k, err := ca(ctx, r.Client, key, secret.EtcdCA)
		if err != nil {
			return err
		}
		if err := mux.AddEtcdMember(wcl, etcd.Name, cert, k); err != nil {
			return err
		}
	}
	api := pod("kube-apiserver", node)
	if err := create(ctx, mem, api); err != nil {
		return err
	}
	if !mux.HasAPIServer(wcl, api.Name) {
		cert, k, err := ca(ctx, r.Client, key, secret.ClusterCA)
		if err != nil {
			return err
		}
		if err := mux.AddAPIServer(wcl, api.Name, cert, k); err != nil {
			return err
		}
	}
	for _, c := range []string{"kube-scheduler", "kube-controller-manager"} {
		if err := create(ctx, mem, pod(c, node)); err != nil {
			return err
		}
	}
	version := m.Spec.Version
	objs := []client.Object{
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:get-nodes"},
			Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}}},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:get-nodes"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubeadm:get-nodes"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "system:bootstrappers:kubeadm:default-node-token"}},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"},
			Data:       map[string]string{"ClusterConfiguration": ""},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns"},
			Data:       map[string]string{"Corefile": ".:53 {\n    forward . /etc/resolv.conf\n}\n"},
		},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns"},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.12.1"}},
			}}},
		},
	}
	if !skipsKubeProxy(ctx, r.Client, m) {
		objs = append(objs, &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-proxy", Labels: map[string]string{"component": "kube-proxy"}},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:" + version}},
			}}},
		})
	}
	for _, o := range objs {
		if err := create(ctx, mem, o); err != nil {
			return err
		}
	}
	return nil
}

// skipsKubeProxy reports whether the Machine's kubeadm init skips the
// kube-proxy addon (skipPhases addon/kube-proxy), as kubeadm would.
func skipsKubeProxy(ctx context.Context, c client.Client, m *clusterv1.Machine) bool {
	ref := m.Spec.Bootstrap.ConfigRef
	cfg := &unstructured.Unstructured{}
	cfg.SetGroupVersionKind(schema.GroupVersionKind{Group: ref.APIGroup, Version: "v1beta2", Kind: ref.Kind})
	if err := c.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, cfg); err != nil {
		return false
	}
	phases, _, _ := unstructured.NestedStringSlice(cfg.Object, "spec", "initConfiguration", "skipPhases")
	for _, p := range phases {
		if p == "addon/kube-proxy" {
			return true
		}
	}
	return false
}

func ca(ctx context.Context, c client.Client, cluster client.ObjectKey, purpose secret.Purpose) (*x509.Certificate, *rsa.PrivateKey, error) {
	s, err := secret.Get(ctx, c, cluster, purpose)
	if err != nil {
		return nil, nil, err
	}
	cert, err := certs.DecodeCertPEM(s.Data[secret.TLSCrtDataName])
	if err != nil {
		return nil, nil, err
	}
	key, err := certs.DecodePrivateKeyPEM(s.Data[secret.TLSKeyDataName])
	if err != nil {
		return nil, nil, err
	}
	k, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not an RSA key", purpose)
	}
	return cert, k, nil
}

// kubelet registers the node, Ready, and renews its lease.
func kubelet(ctx context.Context, mem inmemoryruntime.Client, name string, labels map[string]string) error {
	now := metav1.Now()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
		}},
	}
	if err := create(ctx, mem, node); err != nil {
		return err
	}
	renew := metav1.NewMicroTime(time.Now())
	seconds := int32(40)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: &seconds, RenewTime: &renew},
	}
	if err := mem.Get(ctx, client.ObjectKeyFromObject(lease), &coordinationv1.Lease{}); apierrors.IsNotFound(err) {
		return create(ctx, mem, lease)
	}
	return mem.Update(ctx, lease)
}

// shutdownIfHostGone powers the node down once its host left provisioned.
func (r *reconciler) shutdownIfHostGone(ctx context.Context, m *clusterv1.Machine) error {
	bmh, err := r.host(ctx, m)
	if err != nil {
		return err
	}
	if bmh != nil {
		state, _, _ := unstructured.NestedString(bmh.Object, "status", "provisioning", "state")
		if state == "provisioned" {
			return nil
		}
	}
	return r.shutdown(ctx, client.ObjectKeyFromObject(m))
}

// shutdown removes a node that is gone: its members, pods and Node.
func (r *reconciler) shutdown(ctx context.Context, key types.NamespacedName) error {
	r.mu.Lock()
	b, ok := r.nodes[key]
	mux := r.wcls[b.wcl]
	r.mu.Unlock()
	if !ok {
		return nil
	}
	mem := r.memory.GetResourceGroup(b.wcl).GetClient()
	if b.cp && mux != nil {
		for _, c := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
			_ = mem.Delete(ctx, pod(c, b.node))
		}
		if mux.HasEtcdMember(b.wcl, "etcd-"+b.node) {
			_ = mux.DeleteEtcdMember(b.wcl, "etcd-"+b.node)
		}
		if mux.HasAPIServer(b.wcl, "kube-apiserver-"+b.node) {
			if err := mux.DeleteAPIServer(b.wcl, "kube-apiserver-"+b.node); err != nil {
				return err
			}
		}
	}
	_ = mem.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: b.node}})
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.nodes, key)
	for _, other := range r.nodes {
		if other.wcl == b.wcl {
			return nil
		}
	}
	// The last node is gone: so is the cluster's state. A new cluster of
	// the same name starts empty, as it would on wiped disks.
	r.memory.DeleteResourceGroup(b.wcl)
	delete(r.wcls, b.wcl)
	return nil
}
