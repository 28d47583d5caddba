package k8s

import (
	"net/url"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// overlay is one deployable kustomization and what the tests expect of it.
type overlay struct {
	dir       string
	namespace string
	imageTag  string
	// Secrets the operator creates outside the repository (the overlay's kustomization.yaml
	// documents them); every other referenced Secret or ConfigMap must be in the render.
	externalSecrets []string
	minReplicas     int32 // lower bound for every HPA and for the ingest workers
	// secondary marks a secondary site (docs/two-sites.md): no transfer service, no migration Job, a
	// local read replica, and the main site's database for every service but the gateway.
	secondary bool
}

var overlays = []overlay{
	{dir: "overlays/dev", namespace: "obsops-dev", imageTag: "dev", minReplicas: 1,
		externalSecrets: []string{"obsops-authtoken"}},
	{dir: "overlays/prod", namespace: "obsops", imageTag: "0.1.0", minReplicas: 2,
		externalSecrets: []string{"obsops-authtoken", "obsops-authtoken-credentials", "obsops-catalog-credentials", "obsops-database",
			"obsops-gateway-credentials", "obsops-ingest-credentials", "obsops-internal", "obsops-site-credentials", "obsops-transfer-credentials"}},
	{dir: "overlays/secondary", namespace: "obsops-secondary", imageTag: "0.1.0", minReplicas: 1, secondary: true,
		externalSecrets: []string{"obsops-authtoken", "obsops-authtoken-credentials", "obsops-catalog-credentials", "obsops-gateway-credentials",
			"obsops-ingest-credentials", "obsops-internal", "obsops-main-database", "obsops-replay-credentials", "obsops-replication", "obsops-site-credentials"}},
}

// The workloads of the suite: every service's Deployment, and its HTTP port.
var servicePorts = map[string]int32{
	"gateway": 8080, "authtoken": 8081, "transfer": 8082, "catalog": 8083,
	"ingest-api": 8084, "ingest-worker": 8084, "site": 8085,
}

// workloads returns the Deployments the overlay must have, with their HTTP ports: every service,
// except transfer at a secondary site (it runs at the data centre).
func (o overlay) workloads() map[string]int32 {
	m := map[string]int32{}
	for name, port := range servicePorts {
		if o.secondary && name == "transfer" {
			continue
		}
		m[name] = port
	}
	return m
}

const (
	workerName    = "ingest-worker"
	ingestQueue   = "asynq:{ingest}:pending"
	defaultDrain  = 5 * time.Second  // pkg/config.Common OPS_SHUTDOWN_DRAIN
	defaultTimout = 15 * time.Second // pkg/config.Common OPS_SHUTDOWN_TIMEOUT
)

// rendered is one overlay, rendered offline and strict-decoded, indexed by kind and name.
type rendered struct {
	overlay
	objects      []Object
	namespaces   map[string]*corev1.Namespace
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	services     map[string]*corev1.Service
	accounts     map[string]*corev1.ServiceAccount
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	jobs         map[string]*batchv1.Job
	pdbs         map[string]*policyv1.PodDisruptionBudget
	hpas         map[string]*autoscalingv2.HorizontalPodAutoscaler
	ingresses    map[string]*networkingv1.Ingress
	netpols      map[string]*networkingv1.NetworkPolicy
	scaled       map[string]*ScaledObject
	triggerAuths map[string]*TriggerAuthentication
}

var renderCache = map[string]*rendered{}

func render(t *testing.T, o overlay) *rendered {
	t.Helper()
	if r, ok := renderCache[o.dir]; ok {
		return r
	}
	out, err := Render(o.dir)
	if err != nil {
		t.Fatalf("render %s: %v", o.dir, err)
	}
	objs, err := DecodeAll(out)
	if err != nil {
		t.Fatalf("%s does not strict-decode into the Kubernetes API types:\n%v", o.dir, err)
	}
	r := &rendered{
		overlay: o, objects: objs,
		namespaces: map[string]*corev1.Namespace{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, services: map[string]*corev1.Service{},
		accounts: map[string]*corev1.ServiceAccount{}, deployments: map[string]*appsv1.Deployment{},
		statefulSets: map[string]*appsv1.StatefulSet{}, jobs: map[string]*batchv1.Job{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		ingresses: map[string]*networkingv1.Ingress{}, netpols: map[string]*networkingv1.NetworkPolicy{},
		scaled: map[string]*ScaledObject{}, triggerAuths: map[string]*TriggerAuthentication{},
	}
	seen := map[string]bool{}
	for _, o := range objs {
		id := o.Kind + "/" + o.Name
		if seen[id] {
			t.Fatalf("%s: %s twice", r.dir, id)
		}
		seen[id] = true
		switch v := o.Value.(type) {
		case *corev1.Namespace:
			r.namespaces[o.Name] = v
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = v
		case *corev1.Secret:
			r.secrets[o.Name] = v
		case *corev1.Service:
			r.services[o.Name] = v
		case *corev1.ServiceAccount:
			r.accounts[o.Name] = v
		case *appsv1.Deployment:
			r.deployments[o.Name] = v
		case *appsv1.StatefulSet:
			r.statefulSets[o.Name] = v
		case *batchv1.Job:
			r.jobs[o.Name] = v
		case *policyv1.PodDisruptionBudget:
			r.pdbs[o.Name] = v
		case *autoscalingv2.HorizontalPodAutoscaler:
			r.hpas[o.Name] = v
		case *networkingv1.Ingress:
			r.ingresses[o.Name] = v
		case *networkingv1.NetworkPolicy:
			r.netpols[o.Name] = v
		case *ScaledObject:
			r.scaled[o.Name] = v
		case *TriggerAuthentication:
			r.triggerAuths[o.Name] = v
		default:
			t.Fatalf("%s: %s decoded into unexpected %T", r.dir, id, v)
		}
	}
	renderCache[o.dir] = r
	return r
}

// forEachOverlay runs fn as a subtest per overlay.
func forEachOverlay(t *testing.T, fn func(t *testing.T, r *rendered)) {
	for _, o := range overlays {
		t.Run(path.Base(o.dir), func(t *testing.T) { fn(t, render(t, o)) })
	}
}

// podTemplates returns every pod template of the render, keyed "Kind/name".
func (r *rendered) podTemplates() map[string]*corev1.PodTemplateSpec {
	m := map[string]*corev1.PodTemplateSpec{}
	for n, d := range r.deployments {
		m["Deployment/"+n] = &d.Spec.Template
	}
	for n, s := range r.statefulSets {
		m["StatefulSet/"+n] = &s.Spec.Template
	}
	for n, j := range r.jobs {
		m["Job/"+n] = &j.Spec.Template
	}
	return m
}

// env returns a container's effective literal environment: its envFrom ConfigMaps, then env.
func (r *rendered) env(t *testing.T, c *corev1.Container) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, src := range c.EnvFrom {
		if src.ConfigMapRef != nil {
			if cm, ok := r.configMaps[src.ConfigMapRef.Name]; ok {
				for k, v := range cm.Data {
					m[src.Prefix+k] = v
				}
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			m[e.Name] = e.Value
		}
	}
	return m
}

func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("bad selector %v: %v", sel, err)
	}
	return s.Matches(labels.Set(podLabels))
}

func TestOverlaysRenderAndStrictDecode(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		if len(r.objects) < 40 {
			t.Fatalf("only %d objects rendered", len(r.objects))
		}
		if _, ok := r.namespaces[r.namespace]; !ok {
			t.Errorf("Namespace %s is not part of the overlay", r.namespace)
		}
		for _, o := range r.objects {
			if o.Kind == "Namespace" {
				if o.Name != r.namespace {
					t.Errorf("unexpected Namespace %s", o.Name)
				}
				continue
			}
			if o.Namespace != r.namespace {
				t.Errorf("%s/%s is in namespace %q, want %q", o.Kind, o.Name, o.Namespace, r.namespace)
			}
		}
		ns := r.namespaces[r.namespace]
		if ns != nil && ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Errorf("namespace %s does not enforce the restricted Pod Security Standard", r.namespace)
		}
	})
}

func TestWorkloadsAreHardened(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for name, want := range r.workloads() {
			if r.deployments[name] == nil {
				t.Errorf("Deployment %s missing (have %v)", name, keys(r.deployments))
				continue
			}
			c := r.deployments[name].Spec.Template.Spec.Containers
			wantPorts := 1
			if name == "gateway" { // plus its metrics listener, apart from the public port
				wantPorts = 2
				if len(c) == 1 && (len(c[0].Ports) != 2 || c[0].Ports[1].Name != "metrics" || c[0].Ports[1].ContainerPort != 9080 ||
					r.env(t, &c[0])["OPS_GATEWAY_METRICS_ADDR"] != ":9080") {
					t.Errorf("Deployment gateway: want port metrics=9080 and OPS_GATEWAY_METRICS_ADDR=:9080")
				}
			}
			if len(c) != 1 || len(c[0].Ports) != wantPorts || c[0].Ports[0].ContainerPort != want || c[0].Ports[0].Name != "http" {
				t.Errorf("Deployment %s: want one container with port http=%d first", name, want)
			}
			addr := "OPS_" + strings.ToUpper(strings.SplitN(name, "-", 2)[0]) + "_ADDR"
			if got := r.env(t, &c[0])[addr]; got != ":"+strconv.Itoa(int(want)) {
				t.Errorf("Deployment %s: %s=%q, want %q (listen on every interface of the pod)", name, addr, got, ":"+strconv.Itoa(int(want)))
			}
		}
		for id, tpl := range r.podTemplates() {
			ps := &tpl.Spec
			if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
				t.Errorf("%s: automountServiceAccountToken must be false", id)
			}
			if ps.ServiceAccountName == "" || r.accounts[ps.ServiceAccountName] == nil {
				t.Errorf("%s: serviceAccountName %q is not a rendered ServiceAccount", id, ps.ServiceAccountName)
			}
			psc := ps.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
				t.Errorf("%s: pod securityContext must set runAsNonRoot and a non-zero runAsUser", id)
			}
			if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: pod seccompProfile must be RuntimeDefault", id)
			}
			// Only Redis has one (it writes the ACL file), held to the same rules as the containers.
			if len(ps.InitContainers) > 0 && id != "StatefulSet/redis" {
				t.Errorf("%s: unexpected init containers", id)
			}
			all := append(slices.Clone(ps.InitContainers), ps.Containers...)
			for i := range all {
				c := &all[i]
				where := id + " container " + c.Name
				sc := c.SecurityContext
				switch {
				case sc == nil:
					t.Errorf("%s: no securityContext", where)
					continue
				case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
					t.Errorf("%s: runAsNonRoot must be true", where)
				case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
					t.Errorf("%s: readOnlyRootFilesystem must be true", where)
				case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
					t.Errorf("%s: allowPrivilegeEscalation must be false", where)
				case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
					t.Errorf("%s: capabilities must drop ALL and add none", where)
				case sc.Privileged != nil && *sc.Privileged:
					t.Errorf("%s: privileged", where)
				case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
					t.Errorf("%s: seccompProfile must be RuntimeDefault", where)
				}
				req, lim := c.Resources.Requests, c.Resources.Limits
				if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
					t.Errorf("%s: needs cpu and memory requests and a memory limit, got %v / %v", where, req, lim)
				} else if lim.Memory().Cmp(*req.Memory()) < 0 {
					t.Errorf("%s: memory limit below its request", where)
				}
				if tag := imageTag(c.Image); tag == "" || tag == "latest" {
					t.Errorf("%s: image %q needs a fixed tag", where, c.Image)
				}
				if strings.HasPrefix(id, "Job/") || i < len(ps.InitContainers) { // run to completion: no probes
					continue
				}
				if c.LivenessProbe == nil || c.ReadinessProbe == nil {
					t.Errorf("%s: needs liveness and readiness probes", where)
					continue
				}
				if strings.HasPrefix(id, "Deployment/") {
					checkHTTPProbe(t, where+" liveness", c.LivenessProbe, "/healthz")
					checkHTTPProbe(t, where+" readiness", c.ReadinessProbe, "/readyz")
					if c.StartupProbe != nil {
						checkHTTPProbe(t, where+" startup", c.StartupProbe, "/healthz")
					}
				}
			}
		}
	})
}

func checkHTTPProbe(t *testing.T, where string, p *corev1.Probe, wantPath string) {
	t.Helper()
	if p.HTTPGet == nil || p.HTTPGet.Path != wantPath || p.HTTPGet.Port != intstr.FromString("http") {
		t.Errorf("%s: want httpGet %s on port http, got %+v", where, wantPath, p.ProbeHandler)
	}
}

func imageTag(image string) string {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[i+1:]
	}
	return ""
}

// TestGracefulShutdownFitsGracePeriod: SIGTERM turns /readyz 503, the service waits
// OPS_SHUTDOWN_DRAIN, then has OPS_SHUTDOWN_TIMEOUT to stop; the kubelet must not SIGKILL before.
func TestGracefulShutdownFitsGracePeriod(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for name, d := range r.deployments {
			ps := d.Spec.Template.Spec
			env := r.env(t, &ps.Containers[0])
			drain, timeout := duration(t, env, "OPS_SHUTDOWN_DRAIN", defaultDrain), duration(t, env, "OPS_SHUTDOWN_TIMEOUT", defaultTimout)
			if ps.TerminationGracePeriodSeconds == nil {
				t.Errorf("Deployment %s: terminationGracePeriodSeconds not set (default 30s)", name)
				continue
			}
			grace := time.Duration(*ps.TerminationGracePeriodSeconds) * time.Second
			if grace <= drain+timeout {
				t.Errorf("Deployment %s: terminationGracePeriodSeconds %s <= drain %s + shutdown timeout %s", name, grace, drain, timeout)
			}
			if drain <= 0 && d.Name != workerName {
				t.Errorf("Deployment %s: OPS_SHUTDOWN_DRAIN %s: endpoints need time to drop the pod", name, drain)
			}
		}
	})
}

func duration(t *testing.T, env map[string]string, name string, def time.Duration) time.Duration {
	t.Helper()
	v, ok := env[name]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

func TestAutoscaling(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		hpaTargets := map[string]string{}
		for name, h := range r.hpas {
			ref := h.Spec.ScaleTargetRef
			if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || r.deployments[ref.Name] == nil {
				t.Errorf("HPA %s targets %s %s %s, not a rendered Deployment", name, ref.APIVersion, ref.Kind, ref.Name)
			}
			if prev, dup := hpaTargets[ref.Name]; dup {
				t.Errorf("Deployment %s has two HPAs: %s and %s", ref.Name, prev, name)
			}
			hpaTargets[ref.Name] = name
			if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < r.minReplicas || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
				t.Errorf("HPA %s: replicas %v..%d, want min >= %d", name, h.Spec.MinReplicas, h.Spec.MaxReplicas, r.minReplicas)
			}
			if len(h.Spec.Metrics) == 0 {
				t.Errorf("HPA %s has no metrics", name)
			}
		}
		kedaTargets := map[string]string{}
		for name, so := range r.scaled {
			ref := so.Spec.ScaleTargetRef
			if ref == nil || r.deployments[ref.Name] == nil || (ref.Kind != "" && ref.Kind != "Deployment") {
				t.Errorf("ScaledObject %s does not target a rendered Deployment: %+v", name, ref)
				continue
			}
			kedaTargets[ref.Name] = name
		}
		for name, d := range r.deployments {
			_, byHPA := hpaTargets[name]
			_, byKEDA := kedaTargets[name]
			switch {
			case byHPA && byKEDA:
				t.Errorf("Deployment %s is scaled by an HPA and a KEDA ScaledObject: they fight", name)
			case !byHPA && !byKEDA:
				t.Errorf("Deployment %s has no autoscaler", name)
			case name == workerName && !byKEDA:
				t.Errorf("the ingest worker must be scaled by KEDA on the queue, not by an HPA")
			}
			if d.Spec.Replicas != nil {
				t.Errorf("Deployment %s sets replicas: every apply would reset what its autoscaler chose", name)
			}
		}

		// ingest runs as two Deployments of one image: the API (HPA) and the workers (KEDA).
		roles := map[string]string{}
		for name, d := range r.deployments {
			if d.Spec.Template.Labels["app.kubernetes.io/name"] != "ingest" {
				continue
			}
			c := d.Spec.Template.Spec.Containers[0]
			if len(c.Args) != 2 || c.Args[0] != "-role" {
				t.Errorf("ingest Deployment %s: args %v, want -role api|worker", name, c.Args)
				continue
			}
			roles[c.Args[1]] = name
		}
		if roles["api"] != "ingest-api" || roles["worker"] != workerName || len(roles) != 2 {
			t.Errorf("ingest Deployments by role: %v, want api=ingest-api and worker=%s", roles, workerName)
		}
		so := r.scaled[kedaTargets[workerName]]
		if so == nil {
			t.Fatalf("no ScaledObject targets %s", workerName)
		}
		if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "redis" {
			t.Fatalf("ScaledObject %s: want one redis trigger, got %+v", so.Name, so.Spec.Triggers)
		}
		md := so.Spec.Triggers[0].Metadata
		for k := range md {
			if !redisTriggerKeys[k] {
				t.Errorf("ScaledObject %s: unknown redis trigger metadata %q", so.Name, k)
			}
		}
		if md["listName"] != ingestQueue {
			t.Errorf("ScaledObject %s: listName %q, want %q", so.Name, md["listName"], ingestQueue)
		}
		if n, err := strconv.Atoi(md["listLength"]); err != nil || n < 1 {
			t.Errorf("ScaledObject %s: listLength %q must be a positive integer", so.Name, md["listLength"])
		}
		if want := "redis." + r.namespace + ".svc.cluster.local:6379"; r.statefulSets["redis"] != nil && md["address"] != want {
			t.Errorf("ScaledObject %s: address %q, want the in-cluster Redis %q", so.Name, md["address"], want)
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < r.minReplicas ||
			so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount < *so.Spec.MinReplicaCount {
			t.Errorf("ScaledObject %s: replicas %v..%v, want min >= %d (retries and replay need a worker)",
				so.Name, so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount, r.minReplicas)
		}
	})
}

// The metadata keys of KEDA's redis (lists) scaler.
var redisTriggerKeys = map[string]bool{
	"address": true, "addressFromEnv": true, "host": true, "hostFromEnv": true, "port": true, "portFromEnv": true,
	"usernameFromEnv": true, "passwordFromEnv": true, "listName": true, "listLength": true,
	"activationListLength": true, "enableTLS": true, "unsafeSsl": true, "databaseIndex": true,
}

func TestDisruptionBudgets(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for name, d := range r.deployments {
			var found []string
			for pn, p := range r.pdbs {
				if selects(t, p.Spec.Selector, d.Spec.Template.Labels) {
					found = append(found, pn)
				}
			}
			if len(found) != 1 {
				t.Errorf("Deployment %s: want exactly one PodDisruptionBudget, got %v", name, found)
				continue
			}
			p := r.pdbs[found[0]].Spec
			if p.MaxUnavailable == nil && p.MinAvailable == nil {
				t.Errorf("PDB %s sets neither maxUnavailable nor minAvailable", found[0])
			}
			if p.MinAvailable != nil {
				t.Errorf("PDB %s: use maxUnavailable, minAvailable blocks node drains at one replica", found[0])
			}
		}
	})
}

func TestServicesAndUpstreamURLs(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for name, s := range r.services {
			if s.Spec.Type != "" && s.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("Service %s is %s: only the Ingress exposes obsops", name, s.Spec.Type)
			}
			var pods []string
			for dn, d := range r.deployments {
				if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
					pods = append(pods, dn)
					for _, p := range s.Spec.Ports {
						if !hasPort(d.Spec.Template.Spec.Containers, p.TargetPort) {
							t.Errorf("Service %s targets port %s that Deployment %s does not have", name, p.TargetPort.String(), dn)
						}
					}
				}
			}
			for sn, st := range r.statefulSets {
				if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(st.Spec.Template.Labels)) {
					pods = append(pods, sn)
				}
			}
			if len(pods) != 1 {
				t.Errorf("Service %s selects %v, want exactly one workload", name, pods)
			}
		}
		for name := range r.workloads() {
			if name == workerName {
				continue
			}
			if !slices.ContainsFunc(values(r.services), func(s *corev1.Service) bool {
				return labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(r.deployments[name].Spec.Template.Labels))
			}) {
				t.Errorf("Deployment %s has no Service", name)
			}
		}
		// OPS_*_URL must name a Service and one of its ports, and reach the right workload.
		env := r.env(t, &r.deployments["gateway"].Spec.Template.Spec.Containers[0])
		wantTarget := map[string]string{"AUTHTOKEN": "authtoken", "TRANSFER": "transfer", "CATALOG": "catalog", "INGEST": "ingest-api", "SITE": "site"}
		if r.secondary { // no transfer here: its URL leads nowhere (502), never to another site's
			delete(wantTarget, "TRANSFER")
			if r.services["transfer"] != nil || r.deployments["transfer"] != nil {
				t.Errorf("a secondary site runs no transfer service")
			}
		}
		for svc, deploy := range wantTarget {
			v := env["OPS_"+svc+"_URL"]
			u, err := url.Parse(v)
			if err != nil || u.Scheme != "http" {
				t.Errorf("OPS_%s_URL=%q is not an http URL", svc, v)
				continue
			}
			s := r.services[u.Hostname()]
			if s == nil {
				t.Errorf("OPS_%s_URL=%q: no Service %q", svc, v, u.Hostname())
				continue
			}
			port, _ := strconv.Atoi(u.Port())
			if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return int(p.Port) == port }) {
				t.Errorf("OPS_%s_URL=%q: Service %s has no port %d", svc, v, s.Name, port)
			}
			if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(r.deployments[deploy].Spec.Template.Labels)) {
				t.Errorf("OPS_%s_URL=%q: Service %s does not select Deployment %s", svc, v, s.Name, deploy)
			}
		}
	})
}

func hasPort(cs []corev1.Container, target intstr.IntOrString) bool {
	for _, c := range cs {
		for _, p := range c.Ports {
			if (target.Type == intstr.String && p.Name == target.StrVal) || (target.Type == intstr.Int && p.ContainerPort == target.IntVal) {
				return true
			}
		}
	}
	return false
}

func TestMigrationJob(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		if r.secondary { // the schema arrives by replication from the main site; the replica is read-only
			if len(r.jobs) != 0 {
				t.Errorf("a secondary site runs no Job (migrations run at the main site), have %v", keys(r.jobs))
			}
			return
		}
		j := r.jobs["migrate"]
		if j == nil {
			t.Fatalf("no migration Job (have %v)", keys(r.jobs))
		}
		if len(r.jobs) != 1 {
			t.Errorf("unexpected Jobs: %v", keys(r.jobs))
		}
		ps := j.Spec.Template.Spec
		c := ps.Containers[0]
		if !slices.Equal(c.Args, []string{"up"}) {
			t.Errorf("migration Job args %v, want [up]", c.Args)
		}
		if !strings.Contains(c.Image, "/migrate:"+r.imageTag) && !strings.HasPrefix(c.Image, "obsops/migrate:"+r.imageTag) {
			t.Errorf("migration Job image %q, want the migrate image tagged %s", c.Image, r.imageTag)
		}
		if ps.RestartPolicy != corev1.RestartPolicyNever && ps.RestartPolicy != corev1.RestartPolicyOnFailure {
			t.Errorf("migration Job restartPolicy %q", ps.RestartPolicy)
		}
		if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit < 3 {
			t.Errorf("migration Job backoffLimit %v: PostgreSQL may still be starting, retry", j.Spec.BackoffLimit)
		}
		if r.env(t, &c)["OPS_DATABASE_URL_FILE"] == "" {
			t.Errorf("migration Job gets no OPS_DATABASE_URL_FILE")
		}
	})
}

func TestIngressExposesOnlyTheGateway(t *testing.T) {
	hosts := map[string]string{}
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		main := r.ingresses["gateway"]
		if main == nil {
			t.Fatalf("no Ingress gateway (have %v)", keys(r.ingresses))
		}
		for name, ing := range r.ingresses {
			if ing.Spec.DefaultBackend != nil {
				t.Errorf("Ingress %s has a default backend", name)
			}
			for _, rule := range ing.Spec.Rules {
				if rule.Host == "" {
					t.Errorf("Ingress %s: a rule without host", name)
				}
				if rule.HTTP == nil {
					continue
				}
				for _, p := range rule.HTTP.Paths {
					if p.Backend.Service == nil || p.Backend.Service.Name != "gateway" {
						t.Errorf("Ingress %s path %s routes to %+v: only the gateway is exposed", name, p.Path, p.Backend)
					}
				}
			}
		}
		for _, a := range []string{"proxy-read-timeout", "proxy-send-timeout"} {
			v, err := strconv.Atoi(main.Annotations["nginx.ingress.kubernetes.io/"+a])
			if err != nil || v < 3600 {
				t.Errorf("Ingress gateway: %s %q, want >= 3600 s for the overview WebSocket", a, main.Annotations["nginx.ingress.kubernetes.io/"+a])
			}
		}
		if main.Annotations["nginx.ingress.kubernetes.io/proxy-body-size"] == "" {
			t.Errorf("Ingress gateway: no proxy-body-size (ingress-nginx default 1m is below the bulk limits)")
		}
		for dir, h := range hosts {
			if h == main.Spec.Rules[0].Host {
				t.Errorf("%s and %s share the host %q", dir, r.dir, h)
			}
		}
		hosts[r.dir] = main.Spec.Rules[0].Host
		if r.dir != "overlays/dev" && len(main.Spec.TLS) == 0 {
			t.Errorf("%s Ingress without TLS", r.dir)
		}
	})
}

// TestSiteType: every service of a secondary site runs with OPS_SITE_TYPE=secondary, reads the
// local replica (a StatefulSet cloned with pg_basebackup -R through a replication slot, behind
// the Service postgres-replica) and reaches the main site's primary through the Secret
// obsops-main-database (ingest only, as obsops_replay: decisions §45); a main site's services run
// with OPS_SITE_TYPE=main and have no second database.
func TestSiteType(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		want := "main"
		if r.secondary {
			want = "secondary"
		}
		for name, d := range r.deployments {
			ps := d.Spec.Template.Spec
			env := r.env(t, &ps.Containers[0])
			if env["OPS_SITE_TYPE"] != want {
				t.Errorf("Deployment %s: OPS_SITE_TYPE=%q, want %q", name, env["OPS_SITE_TYPE"], want)
			}
			file := env["OPS_MAIN_DATABASE_URL_FILE"]
			// At a secondary only ingest reaches the main, as obsops_replay (decisions §45).
			if !r.secondary || (name != "ingest-api" && name != "ingest-worker") {
				if file != "" || env["OPS_MAIN_DATABASE_URL"] != "" || env["OPS_MAIN_DATABASE_USER"] != "" {
					t.Errorf("Deployment %s: the main database set at a main site or in a secondary's %s (only ingest reaches it)", name, name)
				}
				continue
			}
			mounted := false
			for _, m := range ps.Containers[0].VolumeMounts {
				for _, v := range ps.Volumes {
					if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "obsops-main-database" && file == m.MountPath+"/url" {
						mounted = true
					}
				}
			}
			if !mounted {
				t.Errorf("Deployment %s: OPS_MAIN_DATABASE_URL_FILE=%q is not the url key of the mounted Secret obsops-main-database", name, file)
			}
			// ingest reaches the main as obsops_replay (decisions §45), with that role's Secret.
			pw, replay := env["OPS_MAIN_DATABASE_PASSWORD_FILE"], false
			for _, m := range ps.Containers[0].VolumeMounts {
				for _, v := range ps.Volumes {
					if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "obsops-replay-credentials" && pw == m.MountPath+"/database-password" {
						replay = true
					}
				}
			}
			if env["OPS_MAIN_DATABASE_USER"] != "obsops_replay" || !replay {
				t.Errorf("Deployment %s: OPS_MAIN_DATABASE_USER=%q, OPS_MAIN_DATABASE_PASSWORD_FILE=%q: want obsops_replay and the mounted Secret obsops-replay-credentials",
					name, env["OPS_MAIN_DATABASE_USER"], pw)
			}
		}
		replica := r.statefulSets["postgres-replica"]
		if !r.secondary {
			if replica != nil {
				t.Errorf("a main site has no replica StatefulSet")
			}
			return
		}
		if replica == nil {
			t.Fatalf("no StatefulSet postgres-replica (have %v)", keys(r.statefulSets))
		}
		svc := r.services["postgres-replica"]
		if svc == nil || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(replica.Spec.Template.Labels)) ||
			len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 5432 {
			t.Errorf("Service postgres-replica must select the replica on port 5432")
		}
		c := replica.Spec.Template.Spec.Containers[0]
		script := strings.Join(c.Args, " ")
		for _, part := range []string{"pg_basebackup", " -R ", "-X stream", `-S "$REPLICATION_SLOT"`, "/var/run/secrets/obsops/replication/conninfo", "exec postgres"} {
			if !strings.Contains(script, part) {
				t.Errorf("the replica's start script lacks %q", part)
			}
		}
		if slot := r.env(t, &c)["REPLICATION_SLOT"]; slot != "obsops_secondary" {
			t.Errorf("the replica's REPLICATION_SLOT=%q, want obsops_secondary (docs/two-sites.md)", slot)
		}
		if !slices.ContainsFunc(replica.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == "obsops-replication"
		}) {
			t.Errorf("the replica does not mount the Secret obsops-replication")
		}
	})
}

// TestReferencesResolve: every ConfigMap and Secret a pod uses is rendered (so the hash suffixes
// of generated ones were applied), except the Secrets prod documents as created by the operator,
// and every *_FILE variable names a key of a mounted Secret.
func TestReferencesResolve(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		missing := map[string]bool{}
		for id, tpl := range r.podTemplates() {
			ps := &tpl.Spec
			claims := map[string]bool{} // a StatefulSet's volumeClaimTemplates are volumes too
			if st := r.statefulSets[strings.TrimPrefix(id, "StatefulSet/")]; strings.HasPrefix(id, "StatefulSet/") && st != nil {
				for _, pvc := range st.Spec.VolumeClaimTemplates {
					claims[pvc.Name] = true
				}
			}
			secretVolumes := map[string]string{}
			for _, v := range ps.Volumes {
				switch {
				case v.Secret != nil:
					secretVolumes[v.Name] = v.Secret.SecretName
					if r.secrets[v.Secret.SecretName] == nil {
						missing[v.Secret.SecretName] = true
					}
				case v.ConfigMap != nil:
					if r.configMaps[v.ConfigMap.Name] == nil {
						t.Errorf("%s: ConfigMap %s is not rendered", id, v.ConfigMap.Name)
					}
				}
			}
			for _, c := range ps.Containers {
				for _, src := range c.EnvFrom {
					if src.ConfigMapRef != nil && r.configMaps[src.ConfigMapRef.Name] == nil {
						t.Errorf("%s: envFrom ConfigMap %s is not rendered", id, src.ConfigMapRef.Name)
					}
				}
				mounts := map[string]string{}
				for _, m := range c.VolumeMounts {
					if !slices.ContainsFunc(ps.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) && !claims[m.Name] {
						t.Errorf("%s: mount of unknown volume %s", id, m.Name)
					}
					mounts[m.MountPath] = m.Name
				}
				for _, e := range c.Env {
					if !strings.HasSuffix(e.Name, "_FILE") {
						continue
					}
					if !strings.HasPrefix(e.Name, "OPS_") && !strings.HasPrefix(e.Name, "POSTGRES_") {
						t.Errorf("%s: %s is not read by anything", id, e.Name)
					}
					dir, key := path.Split(e.Value)
					vol, ok := mounts[strings.TrimSuffix(dir, "/")]
					secret := secretVolumes[vol]
					if !ok || secret == "" {
						t.Errorf("%s: %s=%s is not in a mounted Secret", id, e.Name, e.Value)
						continue
					}
					if s := r.secrets[secret]; s != nil {
						if _, ok := s.Data[key]; !ok {
							if _, ok := s.StringData[key]; !ok {
								t.Errorf("%s: %s=%s: Secret %s has no key %q", id, e.Name, e.Value, secret, key)
							}
						}
					}
				}
			}
		}
		got := keys(missing)
		want := append([]string(nil), r.externalSecrets...)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("Secrets referenced but not rendered: %v, want exactly the external ones %v", got, want)
		}
		// authtoken gets the JWT signing key and the OIDC client secret as files.
		env := r.env(t, &r.deployments["authtoken"].Spec.Template.Spec.Containers[0])
		for _, v := range []string{"OPS_JWT_SIGNING_KEY_FILE", "OPS_OIDC_CLIENT_SECRET_FILE", "OPS_DATABASE_PASSWORD_FILE", "OPS_REDIS_PASSWORD_FILE"} {
			if env[v] == "" {
				t.Errorf("authtoken: %s not set", v)
			}
		}
		for name, d := range r.deployments {
			env := r.env(t, &d.Spec.Template.Spec.Containers[0])
			// Every service and the gateway share the internal secret, which alone lets a
			// request name the client address (OPS_TRUSTED_GATEWAYS is gone).
			if env["OPS_INTERNAL_SECRET_FILE"] == "" || env["OPS_TRUSTED_GATEWAYS"] != "" {
				t.Errorf("Deployment %s: want OPS_INTERNAL_SECRET_FILE from Secret obsops-internal and no OPS_TRUSTED_GATEWAYS", name)
			}
			for k := range env {
				if k == "OPS_DATABASE_PASSWORD" || k == "OPS_REDIS_PASSWORD" || k == "OPS_JWT_SIGNING_KEY" || k == "OPS_OIDC_CLIENT_SECRET" || k == "OPS_INTERNAL_SECRET" {
					t.Errorf("Deployment %s: secret %s in a plain env var, mount it and use %s_FILE", name, k, k)
				}
			}
		}
	})
}

func TestRedisIsDurableAndNeverEvicts(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		st := r.statefulSets["redis"]
		if st == nil {
			t.Fatalf("no in-cluster Redis: if you drop components/redis, adapt this test")
		}
		var conf string
		for _, v := range st.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil && r.configMaps[v.ConfigMap.Name] != nil {
				conf = r.configMaps[v.ConfigMap.Name].Data["redis.conf"]
			}
		}
		settings := map[string]string{}
		for _, line := range strings.Split(conf, "\n") {
			if f := strings.Fields(line); len(f) >= 2 && !strings.HasPrefix(f[0], "#") {
				settings[f[0]] = strings.Join(f[1:], " ")
			}
		}
		for k, want := range map[string]string{"appendonly": "yes", "appendfsync": "always", "auto-aof-rewrite-percentage": "400", "auto-aof-rewrite-min-size": "512mb", "maxmemory-policy": "noeviction"} {
			if settings[k] != want {
				t.Errorf("redis.conf %s = %q, want %q", k, settings[k], want)
			}
		}
		args := st.Spec.Template.Spec.Containers[0].Args
		if i := slices.Index(args, "--maxmemory"); i < 0 || i+1 >= len(args) {
			t.Errorf("Redis args %v: set --maxmemory below the memory limit", args)
		}
		if len(st.Spec.VolumeClaimTemplates) != 1 {
			t.Errorf("Redis needs a persistent volume for its AOF")
		}
	})
}

func TestImages(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for id, tpl := range r.podTemplates() {
			for _, c := range tpl.Spec.Containers {
				if !strings.Contains(c.Image, "obsops/") {
					continue // redis, postgres
				}
				if imageTag(c.Image) != r.imageTag {
					t.Errorf("%s: image %s, want tag %s", id, c.Image, r.imageTag)
				}
				base := strings.SplitN(path.Base(c.Image), ":", 2)[0]
				want := strings.SplitN(strings.TrimPrefix(id, strings.SplitN(id, "/", 2)[0]+"/"), "-", 2)[0]
				if base != want {
					t.Errorf("%s runs image %s, want the %s image", id, c.Image, want)
				}
			}
		}
	})
}

// TestNetworkPolicies evaluates the policies for every pair of peers: only the gateway is
// reachable from outside (the ingress controller), services only from the gateway and the peers
// that call them (the catalog calls ingest's fence routes), metrics from the monitoring namespace, Redis and PostgreSQL only from obsops.
func TestNetworkPolicies(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		deny := r.netpols["default-deny-ingress"]
		if deny == nil || len(deny.Spec.PodSelector.MatchLabels)+len(deny.Spec.PodSelector.MatchExpressions) != 0 || len(deny.Spec.Ingress) != 0 {
			t.Fatalf("want a default-deny-ingress NetworkPolicy selecting every pod")
		}
		type target struct {
			labels map[string]string
			port   corev1.ContainerPort
		}
		obsops := map[string]peer{}
		targets := map[string]target{}
		for id, tpl := range r.podTemplates() {
			name := strings.SplitN(id, "/", 2)[1]
			obsops[name] = peer{namespace: r.namespace, podLabels: tpl.Labels}
			if ports := tpl.Spec.Containers[0].Ports; len(ports) > 0 {
				targets[name] = target{tpl.Labels, ports[0]}
			}
		}
		peers := map[string]peer{
			"ingress-controller": {namespace: "ingress-nginx", podLabels: map[string]string{"app.kubernetes.io/name": "ingress-nginx"}},
			"prometheus":         {namespace: "monitoring", podLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
			"keda-operator":      {namespace: "keda", podLabels: map[string]string{"app": "keda-operator"}},
			"other-namespace":    {namespace: "default", podLabels: map[string]string{"app.kubernetes.io/part-of": "obsops"}},
			"stray-pod":          {namespace: r.namespace, podLabels: map[string]string{"run": "debug"}},
		}
		for n, p := range obsops {
			peers[n] = p
		}
		upstreams := []string{"authtoken", "transfer", "catalog", "ingest-api", "site"}
		want := func(from, to string) bool {
			switch {
			case to == "redis": // the services and KEDA's operator pod; not PostgreSQL, not the migration Job
				return slices.Contains([]string{"gateway", "authtoken", "transfer", "catalog", "ingest-api", "ingest-worker", "site"}, from) || from == "keda-operator"
			case to == "postgres" || to == "postgres-replica": // the services with a database and the migration Job
				return slices.Contains([]string{"authtoken", "transfer", "catalog", "ingest-api", "ingest-worker", "site", "migrate"}, from)
			case from == "prometheus":
				return targets[to].port.Name == "http"
			case to == "gateway":
				return from == "ingress-controller"
			case to == "authtoken": // routing, /health, and the services verifying API tokens
				return slices.Contains([]string{"gateway", "site", "transfer", "catalog", "ingest-api"}, from)
			case to == "site":
				return from == "gateway"
			case to == "ingest-api" && from == "catalog": // obs-unit fences before deletes
				return true
			case slices.Contains(upstreams, to):
				return from == "gateway" || from == "site"
			default: // ingest-worker: probes and metrics only
				return false
			}
		}
		for from, p := range peers {
			for to, tg := range targets {
				got := allowed(t, r, p, tg.labels, tg.port)
				if got != want(from, to) {
					t.Errorf("%s -> %s:%s allowed=%v, want %v", from, to, tg.port.Name, got, want(from, to))
				}
			}
		}
		// The gateway's metrics port: Prometheus only, never the ingress controller.
		gwMetrics := r.deployments["gateway"].Spec.Template.Spec.Containers[0].Ports[1]
		if !allowed(t, r, peers["prometheus"], targets["gateway"].labels, gwMetrics) {
			t.Errorf("prometheus -> gateway:metrics must be allowed")
		}
		if allowed(t, r, peers["ingress-controller"], targets["gateway"].labels, gwMetrics) {
			t.Errorf("ingress-controller -> gateway:metrics must be denied")
		}
		for _, np := range r.netpols {
			if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				t.Errorf("NetworkPolicy %s: policyTypes must list Ingress", np.Name)
			}
		}
	})
}

type peer struct {
	namespace string
	podLabels map[string]string
}

// allowed tells whether the NetworkPolicies of r let from open a connection to a pod with the
// labels to on port (Kubernetes semantics: a pod selected by any Ingress policy accepts only
// what one of those policies allows).
func allowed(t *testing.T, r *rendered, from peer, to map[string]string, port corev1.ContainerPort) bool {
	t.Helper()
	isolated := false
	nsLabels := map[string]string{"kubernetes.io/metadata.name": from.namespace}
	for _, np := range r.netpols {
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !selects(t, &np.Spec.PodSelector, to) {
			continue
		}
		isolated = true
		for _, rule := range np.Spec.Ingress {
			portOK := len(rule.Ports) == 0
			for _, p := range rule.Ports {
				proto := corev1.ProtocolTCP
				if p.Protocol != nil {
					proto = *p.Protocol
				}
				if proto != port.Protocol && !(port.Protocol == "" && proto == corev1.ProtocolTCP) {
					continue
				}
				if p.Port == nil ||
					(p.Port.Type == intstr.String && p.Port.StrVal == port.Name) ||
					(p.Port.Type == intstr.Int && p.Port.IntVal == port.ContainerPort) {
					portOK = true
				}
			}
			if !portOK {
				continue
			}
			if len(rule.From) == 0 {
				return true
			}
			for _, f := range rule.From {
				if f.IPBlock != nil || (f.PodSelector == nil && f.NamespaceSelector == nil) {
					continue
				}
				nsOK := from.namespace == r.namespace
				if f.NamespaceSelector != nil {
					nsOK = selects(t, f.NamespaceSelector, nsLabels)
				}
				podOK := f.PodSelector == nil || selects(t, f.PodSelector, from.podLabels)
				if nsOK && podOK {
					return true
				}
			}
		}
	}
	return !isolated
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func values[V any](m map[string]V) []V {
	vs := make([]V, 0, len(m))
	for _, k := range keys(m) {
		vs = append(vs, m[k])
	}
	return vs
}

// TestSecondaryHoldsNoMainSigningKey: the observatory cannot mint the data centre's credentials
// (issue 24, point 8). In the secondary overlay no pod mounts, or reads through env or envFrom, a
// Secret key named jwt-signing-key (the main site's private key); Secret volumes of
// obsops-authtoken list their keys (a whole-Secret mount would expose any key put there); and
// authtoken signs with the site's own key (site-jwt-signing-key) and trusts the main's public
// keys (main-jwt-public-keys), both mounted items. A main site sets no OPS_JWT_MAIN_PUBLIC_KEYS_FILE.
func TestSecondaryHoldsNoMainSigningKey(t *testing.T) {
	const mainKey = "jwt-signing-key"
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		at := r.deployments["authtoken"].Spec.Template.Spec
		env := r.env(t, &at.Containers[0])
		if !r.secondary {
			if env["OPS_JWT_MAIN_PUBLIC_KEYS_FILE"] != "" {
				t.Errorf("a main site trusts no other site's keys, but OPS_JWT_MAIN_PUBLIC_KEYS_FILE=%q", env["OPS_JWT_MAIN_PUBLIC_KEYS_FILE"])
			}
			return
		}
		for id, tpl := range r.podTemplates() {
			ps := &tpl.Spec
			for _, c := range append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...) {
				for _, src := range c.EnvFrom {
					if src.SecretRef != nil && src.SecretRef.Name == "obsops-authtoken" {
						t.Errorf("%s: envFrom Secret obsops-authtoken exposes every key, the main's %s included", id, mainKey)
					}
				}
				for _, e := range c.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Key == mainKey {
						t.Errorf("%s: %s reads Secret key %s (the main site's private key)", id, e.Name, mainKey)
					}
					if path.Base(e.Value) == mainKey {
						t.Errorf("%s: %s=%s names the main site's private key", id, e.Name, e.Value)
					}
				}
			}
			for _, v := range ps.Volumes {
				if v.Secret == nil {
					continue
				}
				if v.Secret.SecretName == "obsops-authtoken" && len(v.Secret.Items) == 0 {
					t.Errorf("%s: volume %s mounts all of Secret obsops-authtoken; list its keys so no %s can be mounted", id, v.Name, mainKey)
				}
				for _, it := range v.Secret.Items {
					if it.Key == mainKey || path.Base(it.Path) == mainKey {
						t.Errorf("%s: volume %s mounts %s (the main site's private key)", id, v.Name, mainKey)
					}
				}
			}
		}
		// authtoken's own key and the main's public keys are mounted items of obsops-authtoken.
		items := map[string]string{} // file path -> Secret key
		for _, m := range at.Containers[0].VolumeMounts {
			for _, v := range at.Volumes {
				if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "obsops-authtoken" {
					for _, it := range v.Secret.Items {
						items[m.MountPath+"/"+it.Path] = it.Key
					}
				}
			}
		}
		for v, key := range map[string]string{"OPS_JWT_SIGNING_KEY_FILE": "site-jwt-signing-key", "OPS_JWT_MAIN_PUBLIC_KEYS_FILE": "main-jwt-public-keys"} {
			if got := items[env[v]]; got != key {
				t.Errorf("authtoken: %s=%q is Secret key %q of obsops-authtoken, want %q", v, env[v], got, key)
			}
		}
	})
}

// TestEveryServiceHasItsOwnCredentials: least privilege in the stores (docs/operations.md,
// "Database roles", "Redis users"). Every service connects to PostgreSQL as its own role and to
// Redis as its own ACL user, with passwords from its own Secret; no service mounts the owner's
// URL (obsops-database: the migration Job only) and the URLs in the ConfigMap hold no password.
// The Redis pod's users are the suite's (pkg/redisacl/users.acl) and KEDA reads as its own user.
func TestEveryServiceHasItsOwnCredentials(t *testing.T) {
	acl, err := os.ReadFile("../pkg/redisacl/users.acl")
	if err != nil {
		t.Fatal(err)
	}
	forEachOverlay(t, func(t *testing.T, r *rendered) {
		for name, d := range r.deployments {
			svc := strings.TrimSuffix(strings.TrimSuffix(name, "-api"), "-worker")
			ps := d.Spec.Template.Spec
			env := r.env(t, &ps.Containers[0])
			if svc != "gateway" {
				if env["OPS_DATABASE_USER"] != "obsops_"+svc || env["OPS_DATABASE_PASSWORD_FILE"] == "" {
					t.Errorf("Deployment %s: OPS_DATABASE_USER=%q, want obsops_%s with OPS_DATABASE_PASSWORD_FILE", name, env["OPS_DATABASE_USER"], svc)
				}
			}
			if env["OPS_REDIS_USERNAME"] != svc || env["OPS_REDIS_PASSWORD_FILE"] == "" {
				t.Errorf("Deployment %s: OPS_REDIS_USERNAME=%q, want %s with OPS_REDIS_PASSWORD_FILE", name, env["OPS_REDIS_USERNAME"], svc)
			}
			for _, k := range []string{"OPS_DATABASE_URL", "OPS_REDIS_URL"} {
				if u, err := url.Parse(env[k]); err != nil || u.User != nil {
					t.Errorf("Deployment %s: %s=%q must name no user or password", name, k, env[k])
				}
			}
			own := false
			for _, v := range ps.Volumes {
				if v.Secret == nil {
					continue
				}
				if sameGenerated(v.Secret.SecretName, "obsops-database") {
					t.Errorf("Deployment %s mounts the schema owner's obsops-database", name)
				}
				if sameGenerated(v.Secret.SecretName, "obsops-"+svc+"-credentials") {
					own = true
				} else if svc == "ingest" && r.secondary && v.Secret.SecretName == "obsops-replay-credentials" {
					continue // a secondary's ingest at the main: obsops_replay (decisions §45)
				} else if strings.HasSuffix(v.Secret.SecretName, "-credentials") {
					t.Errorf("Deployment %s mounts another's %s", name, v.Secret.SecretName)
				}
			}
			if !own {
				t.Errorf("Deployment %s does not mount obsops-%s-credentials", name, svc)
			}
		}
		if j := r.jobs["migrate"]; j != nil {
			env := r.env(t, &j.Spec.Template.Spec.Containers[0])
			if env["OPS_ROLE_PASSWORDS_DIR"] == "" {
				t.Errorf("the migration Job sets no role passwords (OPS_ROLE_PASSWORDS_DIR)")
			}
		}
		cm := r.configMaps[redisConfigMap(t, r)]
		if cm == nil || cm.Data["users.acl"] != string(acl) {
			t.Errorf("the Redis ConfigMap's users.acl differs from pkg/redisacl/users.acl: copy it to k8s/components/redis/users.acl")
		}
		if cm != nil && !strings.Contains(cm.Data["redis.conf"], "\naclfile ") {
			t.Errorf("redis.conf names no aclfile")
		}
		so := r.scaled[workerName]
		if so == nil || so.Spec.Triggers[0].AuthenticationRef == nil {
			t.Fatalf("the ingest workers' ScaledObject authenticates to Redis as nobody")
		}
		ta := r.triggerAuths[so.Spec.Triggers[0].AuthenticationRef.Name]
		if ta == nil {
			t.Fatalf("TriggerAuthentication %s is not rendered", so.Spec.Triggers[0].AuthenticationRef.Name)
		}
		params := map[string]string{}
		for _, ref := range ta.Spec.SecretTargetRef {
			params[ref.Parameter] = ref.Name + "/" + ref.Key
		}
		if params["username"] != "obsops-keda-credentials/redis-username" || params["password"] != "obsops-keda-credentials/redis-password" {
			t.Errorf("KEDA's Redis credentials: %v, want username and password from obsops-keda-credentials", params)
		}
	})
}

// sameGenerated tells whether name is want, or want with the hash suffix kustomize's generators add.
func sameGenerated(name, want string) bool {
	rest, ok := strings.CutPrefix(name, want)
	return ok && (rest == "" || (len(rest) == 11 && rest[0] == '-'))
}

// redisConfigMap is the name of the ConfigMap the Redis StatefulSet mounts (kustomize adds a hash).
func redisConfigMap(t *testing.T, r *rendered) string {
	t.Helper()
	for _, v := range r.statefulSets["redis"].Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	t.Fatal("the Redis StatefulSet mounts no ConfigMap")
	return ""
}
