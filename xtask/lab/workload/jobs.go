package main

// The lab's node for the remediation Jobs MetalPlane's WatchOperation
// creates. The management cluster has no kubelet, so this runs each Job
// as one would: the container's command from its image (pulled from the
// lab's registry, the file at the command's path), its args, its env with
// every secretKeyRef resolved from the cluster (a missing Secret or key
// keeps the pod from starting, CreateContainerConfigError: it stays
// pending until the Job's deadline), as the pod's
// runAsUser, inside the lab's network namespace, within
// activeDeadlineSeconds and backoffLimit; and writes the Job's
// status as the Job controller does. Only namespaces labelled
// jobNodeLabel=true are served: elsewhere a Job stays pending, as on a
// cluster with no node for it.

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// jobNodeLabel on a namespace: the lab's node runs its Jobs.
const jobNodeLabel = "lab.metal.kube.farm/job-node"

type jobRunner struct {
	client.Client
	dir string

	mu      sync.Mutex
	running map[types.NamespacedName]context.CancelFunc
}

func newJobRunner(c client.Client) (*jobRunner, error) {
	dir, err := os.MkdirTemp("", "lab-job-node-")
	if err != nil {
		return nil, err
	}
	// The binaries run as the pods' users: they must reach them.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	return &jobRunner{Client: c, dir: dir, running: map[types.NamespacedName]context.CancelFunc{}}, nil
}

func (r *jobRunner) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	job := &batchv1.Job{}
	if err := r.Get(ctx, req.NamespacedName, job); err != nil {
		if apierrors.IsNotFound(err) {
			r.stop(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if job.DeletionTimestamp != nil {
		r.stop(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: job.Namespace}, ns); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ns.Labels[jobNodeLabel] != "true" || job.Status.StartTime != nil {
		return ctrl.Result{}, nil
	}
	r.mu.Lock()
	_, taken := r.running[req.NamespacedName]
	r.mu.Unlock()
	if taken {
		return ctrl.Result{}, nil
	}
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.Active = 1
	if err := r.Status().Update(ctx, job); err != nil {
		return ctrl.Result{}, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	if d := job.Spec.ActiveDeadlineSeconds; d != nil {
		runCtx, cancel = context.WithTimeout(context.Background(), time.Duration(*d)*time.Second)
	}
	r.mu.Lock()
	r.running[req.NamespacedName] = cancel
	r.mu.Unlock()
	go r.run(runCtx, job.DeepCopy())
	return ctrl.Result{}, nil
}

func (r *jobRunner) stop(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cancel, ok := r.running[key]; ok {
		cancel()
		delete(r.running, key)
	}
}

// run runs the pod until it succeeds or the backoff limit is spent, then
// writes the Job's final status.
func (r *jobRunner) run(ctx context.Context, job *batchv1.Job) {
	key := types.NamespacedName{Namespace: job.Namespace, Name: job.Name}
	logger := log.Log.WithValues("job", key.String())
	defer r.stop(key)
	limit := int32(6)
	if job.Spec.BackoffLimit != nil {
		limit = *job.Spec.BackoffLimit
	}
	failed := int32(0)
	for {
		err := r.runPod(ctx, job, logger.Info)
		var pending *podPending
		switch {
		case err == nil:
			r.finish(job, failed, true, "CompletionsReached", "Reached expected number of succeeded pods")
			return
		case ctx.Err() != nil:
			r.finish(job, failed, false, "DeadlineExceeded", "Job was active longer than specified deadline")
			return
		case errors.As(err, &pending):
			// As a kubelet: the pod waits (CreateContainerConfigError,
			// ErrImagePull) and counts as no failure; only the deadline
			// ends it.
			logger.Info("pod pending", "reason", err.Error())
		default:
			failed++
			logger.Info("pod failed", "attempt", failed, "error", err.Error())
			if failed > limit {
				r.finish(job, failed, false, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
				return
			}
			r.updateFailed(job, failed)
		}
		// The Job controller's back-off starts at 10 s, a kubelet's image
		// and config retries at 10 s too; the lab's at 2 s.
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

// podPending: the container could not be created; the pod stays Pending.
type podPending struct{ reason string }

func (p *podPending) Error() string { return p.reason }

func (r *jobRunner) updateFailed(job *batchv1.Job, failed int32) {
	cur := &batchv1.Job{}
	if err := r.Get(context.Background(), client.ObjectKeyFromObject(job), cur); err != nil {
		return
	}
	cur.Status.Failed = failed
	_ = r.Status().Update(context.Background(), cur)
}

// finish writes the terminal status the Job controller would: for a
// success SuccessCriteriaMet then Complete with completionTime, for a
// failure FailureTarget then Failed.
func (r *jobRunner) finish(job *batchv1.Job, failed int32, ok bool, reason, message string) {
	logger := log.Log.WithValues("job", client.ObjectKeyFromObject(job).String())
	for attempt := 0; attempt < 5; attempt++ {
		cur := &batchv1.Job{}
		if err := r.Get(context.Background(), client.ObjectKeyFromObject(job), cur); err != nil {
			return
		}
		now := metav1.Now()
		cond := func(t batchv1.JobConditionType) batchv1.JobCondition {
			return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: message, LastProbeTime: now, LastTransitionTime: now}
		}
		cur.Status.Active = 0
		cur.Status.Failed = failed
		if ok {
			cur.Status.Succeeded = 1
			cur.Status.CompletionTime = &now
			cur.Status.Conditions = append(cur.Status.Conditions, cond(batchv1.JobSuccessCriteriaMet), cond(batchv1.JobComplete))
		} else {
			cur.Status.Conditions = append(cur.Status.Conditions, cond(batchv1.JobFailureTarget), cond(batchv1.JobFailed))
		}
		err := r.Status().Update(context.Background(), cur)
		if err == nil {
			logger.Info("job finished", "complete", ok, "reason", reason)
			return
		}
		logger.Info("cannot write the job's status", "error", err.Error())
		time.Sleep(time.Second)
	}
}

// runPod runs the Job's one container once.
func (r *jobRunner) runPod(ctx context.Context, job *batchv1.Job, logf func(string, ...any)) error {
	pod := job.Spec.Template.Spec
	if len(pod.Containers) != 1 || len(pod.Containers[0].Command) == 0 {
		return errors.New("the lab's node runs one container with a command")
	}
	c := pod.Containers[0]
	env, err := r.env(ctx, job.Namespace, c.Env)
	if err != nil {
		return &podPending{"CreateContainerConfigError: " + err.Error()}
	}
	bin, err := r.extract(c.Image, c.Command[0], string(job.UID))
	if err != nil {
		return &podPending{"ErrImagePull: " + err.Error()}
	}
	cmd := exec.CommandContext(ctx, bin, append(c.Command[1:], c.Args...)...)
	cmd.Env = env
	if sc := pod.SecurityContext; sc != nil && sc.RunAsUser != nil {
		gid := uint32(0)
		if sc.RunAsGroup != nil {
			gid = uint32(*sc.RunAsGroup)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(*sc.RunAsUser), Gid: gid}}
	}
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		logf("pod", "job", job.Namespace+"/"+job.Name, "line", l)
	}
	return err
}

// env resolves the container's variables as a kubelet does; only value
// and secretKeyRef occur in MetalPlane's Jobs, anything else is refused.
func (r *jobRunner) env(ctx context.Context, ns string, vars []corev1.EnvVar) ([]string, error) {
	out := []string{"PATH=/usr/local/bin"}
	for _, v := range vars {
		switch {
		case v.ValueFrom == nil:
			out = append(out, v.Name+"="+v.Value)
		case v.ValueFrom.SecretKeyRef != nil:
			ref := v.ValueFrom.SecretKeyRef
			s := &corev1.Secret{}
			if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, s); err != nil {
				return nil, fmt.Errorf("secret %q not found for %s: %w", ref.Name, v.Name, err)
			}
			val, ok := s.Data[ref.Key]
			if !ok {
				return nil, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, ns, ref.Name)
			}
			out = append(out, v.Name+"="+string(val))
		default:
			return nil, fmt.Errorf("env %s: the lab's node resolves value and secretKeyRef only", v.Name)
		}
	}
	return out, nil
}

// extract pulls the image and writes the file at `file` in its
// filesystem to the node's folder; that copy's path.
func (r *jobRunner) extract(image, file, uid string) (string, error) {
	img, err := crane.Pull(image, crane.Insecure)
	if err != nil {
		return "", err
	}
	fs := mutate.Extract(img)
	defer fs.Close()
	want := strings.TrimPrefix(path.Clean(file), "/")
	tr := tar.NewReader(fs)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s has no %s", image, file)
		}
		if err != nil {
			return "", err
		}
		if strings.TrimPrefix(path.Clean(h.Name), "/") != want {
			continue
		}
		if h.Mode&0o111 == 0 {
			return "", fmt.Errorf("%s in %s is not executable", file, image)
		}
		dst := filepath.Join(r.dir, uid+"-"+path.Base(want))
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			return "", err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return "", err
		}
		return dst, f.Close()
	}
}
