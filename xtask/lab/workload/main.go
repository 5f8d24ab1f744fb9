// Command workload stands in for the servers' operating system in the lab:
// once BMO (test mode) reports a claimed BareMetalHost provisioned, it
// "boots" the node. The node registers with the labels its KubeadmConfig
// gives the kubelet, and a control-plane node serves the workload cluster's
// API (Cluster API's in-memory API server, as CAPM3's scale tests use) at
// the Cluster's control plane endpoint, inside the lab's network namespace.
// When the Machine goes, the node and its control-plane members go too.
//
// It is also the node remediation Jobs run on (jobs.go).
//
// It is lab tooling, not MetalPlane: it reads the management cluster,
// serves the simulated workload API and runs Jobs.
package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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
	// wedged, on a Machine, stands for a node whose kubelet stopped (a
	// kernel panic, a wedged kubelet): the node stays NotReady until its
	// host is rebooted, as such a server would. Set by the lab's tests.
	wedged = "lab.metal.kube.farm/wedged"
	// CAPM3's remediation powers a host off with annotations of this
	// prefix (BMO's reboot API) and removes them to power it on again.
	rebootAnnot = "reboot.metal3.io"
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
	// TCP forwarders by endpoint (host:port), and the last backend port.
	forwards map[string]*forwarder
	nextPort int32
	// The running node agents by workload cluster, to stop with it.
	agents map[string]context.CancelFunc
}

func main() {
	healthAddr := flag.String("health-addr", "127.0.0.1:9610", "readiness probe address")
	addonsKubeconfig := flag.String("addons-kubeconfig", "", "kubeconfig of the add-on API server serving the groups in addonGroups")
	flag.Parse()
	if *addonsKubeconfig != "" {
		a, err := newAddons(*addonsKubeconfig)
		if err != nil {
			fail(err)
		}
		addonsAPI = a
	}
	ctrl.SetLogger(zap.New())

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = clusterv1.AddToScheme(scheme)
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: *healthAddr,
		// A real node never reads the management cluster. Served from
		// watches, the stand-in's reads of Metal3Machines, hosts and
		// bootstrap configs (unstructured: uncached by default) stay out of
		// the lab's request counts instead of being three GETs per Machine
		// every 30 s.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
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
		Client:   mgr.GetClient(),
		memory:   memory,
		muxes:    map[string]*server.WorkloadClustersMux{},
		wcls:     map[string]*server.WorkloadClustersMux{},
		nodes:    map[types.NamespacedName]booted{},
		forwards: map[string]*forwarder{},
		agents:   map[string]context.CancelFunc{},
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&clusterv1.Machine{}).Named("workload").Complete(r); err != nil {
		fail(err)
	}
	jobs, err := newJobRunner(mgr.GetClient())
	if err != nil {
		fail(err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&batchv1.Job{}).Named("job-node").Complete(jobs); err != nil {
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
	// The UID keeps a re-created cluster of the same name apart from the
	// last one: its listener carries certificates of the old CA.
	wcl := m.Namespace + "/" + m.Spec.ClusterName + "/" + string(cluster.UID)
	caCert, caKey, err := ca(ctx, r.Client, client.ObjectKeyFromObject(cluster), secret.ClusterCA)
	if err != nil {
		return ctrl.Result{RequeueAfter: requeue}, err
	}
	mux, err := r.listener(ep.Host, ep.Port, wcl, caCert, caKey, m.Spec.Version)
	if err != nil {
		return ctrl.Result{}, err
	}
	cfg, err := r.bootstrapConfig(ctx, m)
	if err != nil {
		return ctrl.Result{RequeueAfter: requeue}, err
	}
	// A host powered off has no running kubelet, and a power cycle clears
	// a wedged one. A host whose power the lab really drives (Ironic mode)
	// is rebooted once BMO reports it off. BMO's demo provisioner reports
	// no power change (status.poweredOn follows spec.online), so for its
	// hosts a reboot requested through BMO's reboot API is the signal.
	on, _, _ := unstructured.NestedBool(bmh.Object, "status", "poweredOn")
	rebooting := false
	if !powerReported(bmh) {
		for k := range bmh.GetAnnotations() {
			if strings.HasPrefix(k, rebootAnnot) {
				rebooting = true
			}
		}
	}
	if _, ok := m.Annotations[wedged]; ok && (!on || rebooting) {
		patch := client.MergeFrom(m.DeepCopy())
		delete(m.Annotations, wedged)
		if err := r.Patch(ctx, m, patch); err != nil {
			return ctrl.Result{}, err
		}
	}
	_, stuck := m.Annotations[wedged]
	ready := on && !stuck
	nodeName, labels, taints := registration(cfg, m, bmh)
	mem := r.memory.GetResourceGroup(wcl).GetClient()
	cp := util.IsControlPlaneMachine(m)
	if cp {
		if err := r.controlPlane(ctx, mem, mux, cluster, wcl, nodeName, m, cfg, caCert, caKey); err != nil {
			return ctrl.Result{}, err
		}
		// kubeadm's mark-control-plane phase labels the node and, unless
		// nodeRegistration.taints is given (even empty), taints it.
		labels["node-role.kubernetes.io/control-plane"] = ""
		if taints == nil {
			taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
		}
	}
	if err := kubelet(ctx, mem, nodeName, labels, taints, m.Spec.Version, ready); err != nil {
		return ctrl.Result{}, err
	}
	r.mu.Lock()
	r.nodes[req.NamespacedName] = booted{wcl: wcl, node: nodeName, cp: cp}
	if _, ok := r.agents[wcl]; !ok {
		actx, cancel := context.WithCancel(context.Background())
		r.agents[wcl] = cancel
		go daemonSets(actx, mem)
	}
	r.mu.Unlock()
	// The kubelet renews its lease; KCP and the Machine controller read it.
	// A node that is down is looked at every second: its host's reboot
	// may be short.
	if !ready {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
}

// powerReported says whether BMO reports the host's real power: its BMC
// is one of the lab's sushy-tools systems (Ironic mode), on the
// namespace's loopback. The demo hosts' BMC addresses are never dialled.
func powerReported(bmh *unstructured.Unstructured) bool {
	addr, _, _ := unstructured.NestedString(bmh.Object, "spec", "bmc", "address")
	return strings.HasPrefix(addr, "redfish+http://127.0.0.1:")
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

// bootstrapConfig is the Machine's KubeadmConfig, read once a reconcile.
func (r *reconciler) bootstrapConfig(ctx context.Context, m *clusterv1.Machine) (*unstructured.Unstructured, error) {
	ref := m.Spec.Bootstrap.ConfigRef
	cfg := &unstructured.Unstructured{}
	cfg.SetGroupVersionKind(schema.GroupVersionKind{Group: ref.APIGroup, Version: "v1beta2", Kind: ref.Kind})
	if err := r.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// registration is what the kubelet registers as: the node name and labels
// of the Machine's KubeadmConfig, with the metadata cloud-init would give.
// BMO's config drive names the node after the BareMetalHost (its meta_data
// name, local-hostname and local_hostname are the host's name; BMO
// pkg/provisioner/ironic), not after the Machine.
func registration(cfg *unstructured.Unstructured, m *clusterv1.Machine, bmh *unstructured.Unstructured) (string, map[string]string, []corev1.Taint) {
	meta := map[string]string{
		"{{ ds.meta_data.uuid }}":           string(bmh.GetUID()),
		"{{ ds.meta_data.name }}":           bmh.GetName(),
		"{{ ds.meta_data.local_hostname }}": bmh.GetName(),
		"{{ ds.meta_data.providerid }}":     "",
	}
	fill := func(s string) string {
		for k, v := range meta {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	name, labels := bmh.GetName(), map[string]string{}
	// nil: not given (kubeadm's default); empty: explicitly none.
	var taints []corev1.Taint
	for _, section := range []string{"initConfiguration", "joinConfiguration"} {
		reg, found, _ := unstructured.NestedMap(cfg.Object, "spec", section, "nodeRegistration")
		if !found {
			continue
		}
		if ts, ok := reg["taints"].([]any); ok {
			taints = []corev1.Taint{}
			for _, t := range ts {
				tm, _ := t.(map[string]any)
				key, _ := tm["key"].(string)
				value, _ := tm["value"].(string)
				effect, _ := tm["effect"].(string)
				taints = append(taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)})
			}
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
	return name, labels, taints
}

// listener serves the workload API at host:port, adding host to the
// namespace's loopback (the node's address, reachable only in the lab).
// The in-memory mux binds its listeners on every address (":port"), which
// would collide with the management API server and with other clusters'
// endpoints on the same port; so each cluster gets its own backend port
// and a TCP forwarder on exactly host:port. The mux picks the cluster's
// certificates by the backend port the connection arrives on.
func (r *reconciler) listener(host string, port int32, wcl string, caCert *x509.Certificate, caKey *rsa.PrivateKey, version string) (*server.WorkloadClustersMux, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if mux, ok := r.wcls[wcl]; ok {
		return mux, nil
	}
	r.nextPort++
	backend := 20000 + r.nextPort
	mux, ok := r.muxes[host]
	if !ok {
		out, err := exec.Command("ip", "addr", "replace", host+"/32", "dev", "lo").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("ip addr replace %s: %v: %s", host, err, out)
		}
		mux, err = server.NewWorkloadClustersMux(r.memory, host, server.CustomPorts{MinPort: backend, MaxPort: backend})
		if err != nil {
			return nil, err
		}
		r.muxes[host] = mux
	}
	r.memory.AddResourceGroup(wcl)
	if _, err := mux.InitWorkloadClusterListenerWithPort(wcl, backend); err != nil {
		return nil, err
	}
	if err := mux.RegisterResourceGroup(wcl, wcl); err != nil {
		return nil, err
	}
	// The mux resolves a request's cluster from the port in its Host
	// header (the endpoint's), but certificates from the port the
	// connection arrived on (the backend's): an alias record maps the
	// endpoint port to the same resource group. It is never started, so
	// nothing binds the endpoint port but the forwarder.
	alias := wcl + "@" + fmt.Sprint(port)
	if _, err := mux.InitWorkloadClusterListenerWithPort(alias, port); err != nil {
		return nil, err
	}
	if err := mux.RegisterResourceGroup(alias, wcl); err != nil {
		return nil, err
	}
	target, err := newTarget(host, backend, caCert, caKey, version)
	if err != nil {
		return nil, err
	}
	if err := r.forward(net.JoinHostPort(host, fmt.Sprint(port)), target); err != nil {
		return nil, err
	}
	r.wcls[wcl] = mux
	return mux, nil
}

// target is one cluster incarnation behind an endpoint: its serving
// certificate (from the cluster's CA) and the backend it proxies to.
type target struct {
	cert    *tls.Certificate
	proxy   *httputil.ReverseProxy
	client  *http.Client
	backend string
	version string
}

func newTarget(host string, backend int32, caCert *x509.Certificate, caKey *rsa.PrivateKey, version string) (*target, error) {
	key, err := rsa.GenerateKey(crand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP(host)},
		DNSNames:     []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	backendURL := &url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", backend)}
	proxy := httputil.NewSingleHostReverseProxy(backendURL)
	// Watches stream; flush every write.
	proxy.FlushInterval = -1
	transport := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12},
	}
	proxy.Transport = transport
	director := proxy.Director
	proxy.Director = func(req *http.Request) {
		// Keep the client's Host: the mux finds the cluster by its port.
		h := req.Host
		director(req)
		req.Host = h
	}
	return &target{
		cert:    &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		proxy:   proxy,
		client:  &http.Client{Transport: transport, Timeout: 10 * time.Second},
		backend: backendURL.String(),
		version: version,
	}, nil
}

// ServeHTTP answers /version, which the in-memory API server does not
// serve and Helm asks first, sends the add-on groups to the add-on API
// server, and proxies the rest.
func (t *target) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if addonsAPI != nil {
		if addonsAPI.owns(req.URL.Path) {
			addonsAPI.proxy.ServeHTTP(w, req)
			return
		}
		if req.URL.Path == "/apis" {
			t.mergedGroups(w, req)
			return
		}
	}
	if req.URL.Path == "/version" {
		major, minor, _ := strings.Cut(strings.TrimPrefix(t.version, "v"), ".")
		minor, _, _ = strings.Cut(minor, ".")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"major": major, "minor": minor, "gitVersion": t.version, "platform": "linux/amd64",
		})
		return
	}
	if req.URL.Path == "/openapi/v2" {
		// Helm validates manifests against the OpenAPI schema, which the
		// in-memory server does not publish: serve the built-in types'
		// schema of the management cluster's API server (same Kubernetes).
		doc, err := builtinOpenAPI()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
		_, _ = w.Write(doc)
		return
	}
	if req.Method == http.MethodPut {
		if err := t.unconditional(req); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
	}
	t.proxy.ServeHTTP(w, req)
}

// unconditional gives a PUT without metadata.resourceVersion the current
// one: Kubernetes allows such unconditional updates (Helm's release
// storage relies on them), the in-memory server answers them with a
// conflict.
func (t *target) unconditional(req *http.Request) error {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	// Client-go sends built-in types as protobuf, others as JSON.
	var codec runtime.Serializer = unstructured.UnstructuredJSONScheme
	if strings.HasPrefix(req.Header.Get("Content-Type"), "application/vnd.kubernetes.protobuf") {
		codec = protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)
	}
	obj, _, err := codec.Decode(body, nil, nil)
	if err != nil {
		return nil
	}
	acc, err := meta.Accessor(obj)
	if err != nil || acc.GetResourceVersion() != "" {
		return nil
	}
	get, err := http.NewRequestWithContext(req.Context(), http.MethodGet, t.backend+req.URL.Path, nil)
	if err != nil {
		return err
	}
	get.Host = req.Host
	get.Header.Set("Accept", "application/json")
	resp, err := t.client.Do(get)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	current := &metav1.PartialObjectMetadata{}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(current) != nil {
		return nil
	}
	acc.SetResourceVersion(current.ResourceVersion)
	var buf bytes.Buffer
	if err := codec.Encode(obj, &buf); err != nil {
		return err
	}
	req.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	req.ContentLength = int64(buf.Len())
	req.Header.Set("Content-Length", fmt.Sprint(buf.Len()))
	return nil
}

// addonGroups are the API groups a CNI's CRDs would add to a real
// workload cluster; the in-memory API server serves no CRDs.
var addonGroups = []string{"cilium.io"}

// addons is the lab's add-on API server: a real kube-apiserver holding
// those CRDs, shared by the workload clusters.
type addons struct {
	proxy  *httputil.ReverseProxy
	client *http.Client
	host   string
}

var addonsAPI *addons

func newAddons(kubeconfig string) (*addons, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	proxy.Transport = transport
	director := proxy.Director
	proxy.Director = func(req *http.Request) {
		director(req)
		req.Host = u.Host
		// The add-on server authenticates the lab's admin, whoever the
		// workload client was.
		req.Header.Del("Authorization")
	}
	return &addons{proxy: proxy, client: &http.Client{Transport: transport, Timeout: 10 * time.Second}, host: cfg.Host}, nil
}

// owns reports whether the add-on server answers path: its groups, and
// OpenAPI v3 (the in-memory server publishes none; the add-on server's
// built-in schemas are the same Kubernetes version's).
func (a *addons) owns(path string) bool {
	if path == "/openapi/v3" || strings.HasPrefix(path, "/openapi/v3/") {
		return true
	}
	for _, g := range addonGroups {
		if path == "/apis/"+g || strings.HasPrefix(path, "/apis/"+g+"/") {
			return true
		}
	}
	return false
}

// mergedGroups answers /apis with the in-memory server's groups plus the
// add-on groups, always in the legacy (non-aggregated) form, which every
// client falls back to.
func (t *target) mergedGroups(w http.ResponseWriter, req *http.Request) {
	fetch := func(c *http.Client, base, host string) (*metav1.APIGroupList, error) {
		r, err := http.NewRequestWithContext(req.Context(), http.MethodGet, base+"/apis", nil)
		if err != nil {
			return nil, err
		}
		if host != "" {
			r.Host = host
		}
		r.Header.Set("Accept", "application/json")
		resp, err := c.Do(r)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s/apis: %s", base, resp.Status)
		}
		list := &metav1.APIGroupList{}
		return list, json.NewDecoder(resp.Body).Decode(list)
	}
	own, err := fetch(t.client, t.backend, req.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	extra, err := fetch(addonsAPI.client, addonsAPI.host, "")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for _, g := range extra.Groups {
		for _, want := range addonGroups {
			if g.Name == want {
				own.Groups = append(own.Groups, g)
			}
		}
	}
	own.Kind, own.APIVersion = "APIGroupList", "v1"
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(own)
}

var (
	openAPIOnce sync.Once
	openAPIDoc  []byte
	openAPIErr  error
)

// builtinOpenAPI is the management API server's OpenAPI v2 document (in
// protobuf, as kubectl's validation asks for it) with only Kubernetes' own
// definitions, no CRDs and no paths; fetched once.
func builtinOpenAPI() ([]byte, error) {
	openAPIOnce.Do(func() {
		openAPIDoc, openAPIErr = fetchBuiltinOpenAPI()
	})
	return openAPIDoc, openAPIErr
}

func fetchBuiltinOpenAPI() ([]byte, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/openapi/v2", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	doc := &openapiv2.Document{}
	if err := proto.Unmarshal(raw, doc); err != nil {
		return nil, err
	}
	kept := []*openapiv2.NamedSchema{}
	for _, d := range doc.GetDefinitions().GetAdditionalProperties() {
		if strings.HasPrefix(d.Name, "io.k8s.api.") || strings.HasPrefix(d.Name, "io.k8s.apimachinery.") {
			kept = append(kept, d)
		}
	}
	doc.Definitions = &openapiv2.Definitions{AdditionalProperties: kept}
	doc.Paths = &openapiv2.Paths{}
	return proto.Marshal(doc)
}

// forward serves endpoint for the current target, listening the first
// time. r.mu is held. A connection whose TLS ServerName names an etcd
// member is the mux's own port-forward dialling back (it dials the
// request's Host): it passes through untouched to the backend, which
// serves that member's certificate. Every other connection is the API:
// TLS ends here and HTTP is proxied.
func (r *reconciler) forward(endpoint string, t *target) error {
	if f, ok := r.forwards[endpoint]; ok {
		f.current.Store(t)
		return nil
	}
	f := &forwarder{}
	f.current.Store(t)
	l, err := net.Listen("tcp", endpoint)
	if err != nil {
		return err
	}
	api := &chanListener{conns: make(chan net.Conn), addr: l.Addr()}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { f.current.Load().ServeHTTP(w, req) }),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return f.current.Load().cert, nil
			},
		},
	}
	go func() { _ = srv.ServeTLS(api, "", "") }()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				sni, replay := peekServerName(conn)
				in := &replayConn{Conn: conn, r: replay}
				if !strings.HasPrefix(sni, "etcd-") {
					api.conns <- in
					return
				}
				defer in.Close()
				out, err := net.Dial("tcp", strings.TrimPrefix(f.current.Load().backend, "https://"))
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	r.forwards[endpoint] = f
	return nil
}

// peekServerName reads the TLS ClientHello's server name; the returned
// reader yields every byte read from conn again, then the rest.
func peekServerName(conn net.Conn) (string, io.Reader) {
	var seen bytes.Buffer
	var name string
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_ = tls.Server(readOnlyConn{r: io.TeeReader(conn, &seen)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name = h.ServerName
			return nil, errPeeked
		},
	}).Handshake()
	_ = conn.SetReadDeadline(time.Time{})
	return name, io.MultiReader(&seen, conn)
}

var errPeeked = fmt.Errorf("client hello read")

type readOnlyConn struct {
	net.Conn
	r io.Reader
}

func (c readOnlyConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c readOnlyConn) Write(p []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (c readOnlyConn) Close() error                     { return nil }
func (c readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (c readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (c readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
func (c readOnlyConn) LocalAddr() net.Addr              { return nil }
func (c readOnlyConn) RemoteAddr() net.Addr             { return nil }

type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// chanListener hands connections the forwarder accepted to http.Server.
type chanListener struct {
	conns chan net.Conn
	addr  net.Addr
}

func (l *chanListener) Accept() (net.Conn, error) { return <-l.conns, nil }
func (l *chanListener) Close() error              { return nil }
func (l *chanListener) Addr() net.Addr            { return l.addr }

type forwarder struct {
	current atomic.Pointer[target]
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
func (r *reconciler) controlPlane(ctx context.Context, mem inmemoryruntime.Client, mux *server.WorkloadClustersMux, cluster *clusterv1.Cluster, wcl, node string, m *clusterv1.Machine, cfg *unstructured.Unstructured, caCert *x509.Certificate, caKey *rsa.PrivateKey) error {
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
		if err := mux.AddAPIServer(wcl, api.Name, caCert, caKey); err != nil {
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
	if !skipsKubeProxy(cfg) {
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
func skipsKubeProxy(cfg *unstructured.Unstructured) bool {
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

// kubelet registers the node with the kubelet's version (the Machine's,
// as the node image carries it) and reports it Ready while it runs,
// renewing its lease; a node that is down turns Unknown, as the node
// lifecycle controller marks a node whose kubelet stopped posting.
func kubelet(ctx context.Context, mem inmemoryruntime.Client, name string, labels map[string]string, taints []corev1.Taint, version string, ready bool) error {
	now := metav1.Now()
	readiness := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}
	if !ready {
		readiness = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.", LastHeartbeatTime: now, LastTransitionTime: now}
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: version, KubeProxyVersion: version, OperatingSystem: "linux", Architecture: "amd64"},
			Conditions: []corev1.NodeCondition{
				readiness,
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
			},
		},
	}
	current := &corev1.Node{}
	if err := mem.Get(ctx, client.ObjectKeyFromObject(node), current); apierrors.IsNotFound(err) {
		if err := create(ctx, mem, node); err != nil {
			return err
		}
	} else if err != nil {
		return err
	} else {
		// The status as this kubelet posts it: readiness only when it
		// changes (its transition time matters to health checks).
		changed := current.Status.NodeInfo.KubeletVersion != version
		current.Status.NodeInfo = node.Status.NodeInfo
		found := false
		for i, c := range current.Status.Conditions {
			if c.Type != corev1.NodeReady {
				continue
			}
			found = true
			if c.Status != readiness.Status {
				current.Status.Conditions[i] = readiness
				changed = true
			}
		}
		if !found {
			current.Status.Conditions = append(current.Status.Conditions, readiness)
			changed = true
		}
		if changed {
			if err := mem.Update(ctx, current); err != nil {
				return err
			}
		}
	}
	if !ready {
		return nil
	}
	renew := metav1.NewMicroTime(time.Now())
	seconds := int32(40)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: &seconds, RenewTime: &renew},
	}
	currentLease := &coordinationv1.Lease{}
	if err := mem.Get(ctx, client.ObjectKeyFromObject(lease), currentLease); apierrors.IsNotFound(err) {
		return create(ctx, mem, lease)
	} else if err != nil {
		return err
	}
	currentLease.Spec.RenewTime = &renew
	return mem.Update(ctx, currentLease)
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
	// Nodes are named after their host: a Machine now on the same host
	// (a rollout with maxSurge 0 reuses it) owns the name, and its node.
	r.mu.Lock()
	for k, other := range r.nodes {
		if k != key && other.wcl == b.wcl && other.node == b.node {
			delete(r.nodes, key)
			r.mu.Unlock()
			return nil
		}
	}
	r.mu.Unlock()
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
	if cancel, ok := r.agents[b.wcl]; ok {
		cancel()
		delete(r.agents, b.wcl)
	}
	r.memory.DeleteResourceGroup(b.wcl)
	delete(r.wcls, b.wcl)
	return nil
}

// daemonSets plays the DaemonSet controller and the kubelets for what add-on
// charts install: every DaemonSet runs one ready, up-to-date pod per node,
// reported in the status fields helm's wait reads (observedGeneration and
// the scheduled/ready counts). Without it a Release that waits for its
// resources would never be ready in the lab, as on a cluster whose nodes
// never start the pods.
func daemonSets(ctx context.Context, mem inmemoryruntime.Client) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// Objects written through the workload API are stored unstructured:
	// list them so.
	list := func(kind string) (*unstructured.UnstructuredList, error) {
		l := &unstructured.UnstructuredList{}
		gv := "v1"
		if kind == "DaemonSetList" {
			gv = "apps/v1"
		}
		l.SetAPIVersion(gv)
		l.SetKind(kind)
		return l, mem.List(ctx, l)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		nodes, err := list("NodeList")
		if err != nil {
			ctrl.Log.Error(err, "listing the workload's nodes")
			continue
		}
		dss, err := list("DaemonSetList")
		if err != nil {
			ctrl.Log.Error(err, "listing the workload's DaemonSets")
			continue
		}
		n := int64(len(nodes.Items))
		for i := range dss.Items {
			ds := &dss.Items[i]
			gen := ds.GetGeneration()
			num := func(f string) int64 {
				v, _, _ := unstructured.NestedInt64(ds.Object, "status", f)
				return v
			}
			if num("observedGeneration") == gen && num("desiredNumberScheduled") == n &&
				num("updatedNumberScheduled") == n && num("numberReady") == n && num("numberAvailable") == n {
				continue
			}
			// The in-memory store counts every change, status too, as a new
			// generation: the update below is the one observed.
			_ = unstructured.SetNestedMap(ds.Object, map[string]any{
				"observedGeneration":     gen + 1,
				"desiredNumberScheduled": n,
				"currentNumberScheduled": n,
				"updatedNumberScheduled": n,
				"numberReady":            n,
				"numberAvailable":        n,
				"numberMisscheduled":     int64(0),
			}, "status")
			if err := mem.Update(ctx, ds); err != nil {
				ctrl.Log.Error(err, "updating a DaemonSet's status", "daemonset", ds.GetName())
			}
		}
	}
}
