package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	osexec "os/exec"
	"sigs.k8s.io/yaml"
)

// manifest is one object of deploy/k8s: where it is, and it decoded.
type manifest struct {
	file, kind, name, namespace string
	obj                         any
}

// decodeManifests reads every document of deploy/k8s/*.yaml (but the
// kustomization) into its Kubernetes API type, strictly: a field the type
// does not have, a wrong type or an unknown kind fails, as kubectl apply
// --dry-run=client would.
func decodeManifests(t *testing.T, dir string) []manifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifest in %s (%v)", dir, err)
	}
	var out []manifest
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Errorf("%s document %d: not YAML: %v", filepath.Base(f), i+1, err)
				continue
			}
			var obj any
			switch head.APIVersion + " " + head.Kind {
			case "v1 Namespace":
				obj = &corev1.Namespace{}
			case "v1 ConfigMap":
				obj = &corev1.ConfigMap{}
			case "v1 Secret":
				obj = &corev1.Secret{}
			case "v1 Service":
				obj = &corev1.Service{}
			case "apps/v1 Deployment":
				obj = &appsv1.Deployment{}
			case "batch/v1 Job":
				obj = &batchv1.Job{}
			default:
				t.Errorf("%s document %d: kind %q of %q is not one this test knows; add its type to decodeManifests", filepath.Base(f), i+1, head.Kind, head.APIVersion)
				continue
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s document %d (%s): %v", filepath.Base(f), i+1, head.Kind, err)
				continue
			}
			m := manifest{file: filepath.Base(f), kind: head.Kind, obj: obj}
			switch o := obj.(type) {
			case *corev1.Namespace:
				m.name = o.Name
			case *corev1.ConfigMap:
				m.name, m.namespace = o.Name, o.Namespace
			case *corev1.Secret:
				m.name, m.namespace = o.Name, o.Namespace
			case *corev1.Service:
				m.name, m.namespace = o.Name, o.Namespace
			case *appsv1.Deployment:
				m.name, m.namespace = o.Name, o.Namespace
			case *batchv1.Job:
				m.name, m.namespace = o.Name, o.Namespace
			}
			out = append(out, m)
		}
	}
	return out
}

func stripComments(doc string) string {
	var b bytes.Buffer
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestKubernetesManifests decodes deploy/k8s into the Kubernetes types and
// checks what the API server or the kubelet would refuse or break on: the
// kustomization lists every file, every object is named and in the
// namespace, a Deployment's selector selects its pods, every env and
// volume reference resolves (ConfigMap keys, volumes, probe ports), every
// image is one deploy/build-images.sh builds, and each service of services/
// has its Deployment.
func TestKubernetesManifests(t *testing.T) {
	root := repoRoot(t)
	dir := filepath.Join(root, "deploy", "k8s")
	ms := decodeManifests(t, dir)

	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Images     []any    `json:"images"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, &kust); err != nil || kust.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: %v (kind %q)", err, kust.Kind)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(kust.Resources, b) {
			t.Errorf("kustomization.yaml does not list %s: kubectl apply -k would leave it out", b)
		}
	}
	for _, r := range kust.Resources {
		if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", r, err)
		}
	}

	namespaces := map[string]bool{}
	configKeys := map[string]map[string]bool{}
	for _, m := range ms {
		if m.name == "" {
			t.Errorf("%s: a %s without a name", m.file, m.kind)
		}
		switch o := m.obj.(type) {
		case *corev1.Namespace:
			namespaces[o.Name] = true
		case *corev1.ConfigMap:
			keys := map[string]bool{}
			for k := range o.Data {
				keys[k] = true
			}
			configKeys[o.Name] = keys
		}
	}
	for _, m := range ms {
		if m.kind != "Namespace" && !namespaces[m.namespace] {
			t.Errorf("%s: %s %s is in namespace %q, which the manifests do not create", m.file, m.kind, m.name, m.namespace)
		}
	}

	images := map[string]bool{"policyflow/policyctl:dev": true}
	list, err := commandOutput("sh", filepath.Join(root, "deploy", "stages.sh"), "list")
	if err != nil {
		t.Fatalf("deploy/stages.sh list: %v", err)
	}
	deployments := map[string]bool{}
	for _, s := range strings.Fields(list) {
		images["policyflow/"+s+":dev"] = true
	}
	checkPod := func(where string, spec corev1.PodSpec) {
		volumes := map[string]bool{}
		for _, v := range spec.Volumes {
			volumes[v.Name] = true
		}
		if len(spec.Containers) == 0 {
			t.Errorf("%s: no container", where)
		}
		for _, c := range spec.Containers {
			at := where + " container " + c.Name
			if !images[c.Image] {
				t.Errorf("%s: image %s is not one deploy/build-images.sh builds", at, c.Image)
			}
			ports := map[string]bool{}
			for _, p := range c.Ports {
				ports[p.Name] = true
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
					ref := e.ValueFrom.ConfigMapKeyRef
					if keys, ok := configKeys[ref.Name]; !ok || (!keys[ref.Key] && (ref.Optional == nil || !*ref.Optional)) {
						t.Errorf("%s: env %s reads key %s of ConfigMap %s, which the manifests do not define", at, e.Name, ref.Key, ref.Name)
					}
				}
			}
			for _, vm := range c.VolumeMounts {
				if !volumes[vm.Name] {
					t.Errorf("%s: mounts volume %s, which the pod does not have", at, vm.Name)
				}
			}
			for what, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.StrVal != "" && !ports[p.HTTPGet.Port.StrVal] {
					t.Errorf("%s: %s probe on port %q, which the container does not name", at, what, p.HTTPGet.Port.StrVal)
				}
			}
			if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
				t.Errorf("%s: allowPrivilegeEscalation is not false", at)
			}
		}
		if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: the pod may run as root (runAsNonRoot is not true)", where)
		}
	}
	for _, m := range ms {
		switch o := m.obj.(type) {
		case *appsv1.Deployment:
			deployments[o.Name] = true
			where := fmt.Sprintf("%s: Deployment %s", m.file, o.Name)
			if o.Spec.Selector == nil || len(o.Spec.Selector.MatchLabels) == 0 {
				t.Errorf("%s: no selector", where)
			} else {
				for k, v := range o.Spec.Selector.MatchLabels {
					if o.Spec.Template.Labels[k] != v {
						t.Errorf("%s: selector %s=%s does not select its own pods (labels %v)", where, k, v, o.Spec.Template.Labels)
					}
				}
			}
			checkPod(where, o.Spec.Template.Spec)
		case *batchv1.Job:
			where := fmt.Sprintf("%s: Job %s", m.file, o.Name)
			if p := o.Spec.Template.Spec.RestartPolicy; p != corev1.RestartPolicyOnFailure && p != corev1.RestartPolicyNever {
				t.Errorf("%s: restartPolicy %q; a Job's pods need OnFailure or Never", where, p)
			}
			checkPod(where, o.Spec.Template.Spec)
		case *corev1.Service:
			selected := false
			for _, d := range ms {
				if dep, ok := d.obj.(*appsv1.Deployment); ok && dep.Namespace == o.Namespace {
					all := len(o.Spec.Selector) > 0
					for k, v := range o.Spec.Selector {
						all = all && dep.Spec.Template.Labels[k] == v
					}
					if all {
						selected = true
						for _, p := range o.Spec.Ports {
							found := p.TargetPort.StrVal == ""
							for _, c := range dep.Spec.Template.Spec.Containers {
								for _, cp := range c.Ports {
									found = found || cp.Name == p.TargetPort.StrVal
								}
							}
							if !found {
								t.Errorf("%s: Service %s targets port %q, which Deployment %s does not name", m.file, o.Name, p.TargetPort.StrVal, dep.Name)
							}
						}
					}
				}
			}
			if !selected {
				t.Errorf("%s: Service %s selects no pod of the manifests", m.file, o.Name)
			}
		}
	}
	for _, s := range strings.Fields(list) {
		if !deployments[s] {
			t.Errorf("deploy/k8s has no Deployment of service %s (run deploy/stages.sh render)", s)
		}
	}
}

// commandOutput runs a command and returns its standard output.
func commandOutput(name string, args ...string) (string, error) {
	out, err := osexec.Command(name, args...).Output()
	return string(out), err
}

// sessionTimeout is the session timeout the manifests choose for every
// stage's consumer group (see deploy/README.md, "Recovery after a crash").
const sessionTimeout = "10s"

// TestKubernetesStagesRecoverFast checks that every service's pod is a
// static member of its group under its own pod name with the chosen session
// timeout, so that a crashed container takes its partitions back at once
// and a replacement pod within the session timeout; and that the North API
// is told of every stage (PF_STAGE_OPS), each behind an ops Service.
func TestKubernetesStagesRecoverFast(t *testing.T) {
	root := repoRoot(t)
	ms := decodeManifests(t, filepath.Join(root, "deploy", "k8s"))
	config := map[string]string{}
	services := map[string]*corev1.Service{}
	for _, m := range ms {
		switch o := m.obj.(type) {
		case *corev1.ConfigMap:
			if o.Name == "policyflow-config" {
				config = o.Data
			}
		case *corev1.Service:
			services[o.Name] = o
		}
	}
	stages, err := commandOutput("sh", filepath.Join(root, "deploy", "stages.sh"), "stages")
	if err != nil {
		t.Fatalf("deploy/stages.sh stages: %v", err)
	}
	deployments := 0
	for _, m := range ms {
		dep, ok := m.obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		deployments++
		for _, c := range dep.Spec.Template.Spec.Containers {
			at := fmt.Sprintf("Deployment %s container %s", dep.Name, c.Name)
			env := map[string]corev1.EnvVar{}
			for _, e := range c.Env {
				env[e.Name] = e
			}
			id, ok := env["PF_INSTANCE_ID"]
			if !ok || id.ValueFrom == nil || id.ValueFrom.FieldRef == nil || id.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("%s: PF_INSTANCE_ID is not the pod's name (fieldRef metadata.name): a crashed stage waits out the session timeout", at)
			}
			st, ok := env["PF_SESSION_TIMEOUT"]
			got := st.Value
			if ok && st.ValueFrom != nil && st.ValueFrom.ConfigMapKeyRef != nil {
				got = config[st.ValueFrom.ConfigMapKeyRef.Key]
			}
			if got != sessionTimeout {
				t.Errorf("%s: PF_SESSION_TIMEOUT is %q, want %s", at, got, sessionTimeout)
			}
			if ops, ok := env["PF_STAGE_OPS"]; ok || dep.Labels["app.kubernetes.io/component"] == "api" {
				listed := map[string]bool{}
				for _, a := range strings.Split(ops.Value, ",") {
					host, _, _ := strings.Cut(a, ":")
					listed[host] = true
				}
				for _, s := range strings.Fields(stages) {
					if !listed[s] {
						t.Errorf("%s: PF_STAGE_OPS %q does not list stage %s: the status page would not show it", at, ops.Value, s)
					}
				}
			}
		}
	}
	if deployments == 0 {
		t.Fatal("no Deployment in deploy/k8s")
	}
	for _, s := range strings.Fields(stages) {
		svc := services[s]
		if svc == nil {
			t.Errorf("stage %s has no ops Service: PF_STAGE_OPS names %s:9090", s, s)
			continue
		}
		if !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("Service %s leaves out not-ready pods: the status page would see no answer instead of the reason", s)
		}
	}
}
