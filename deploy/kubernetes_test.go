package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const kubeDir = "deploy/kubernetes"

// scheme knows the API groups a manifest here may use; anything else is an
// error rather than an unchecked document.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// splitYAML returns the non-empty documents of a multi-document YAML stream.
func splitYAML(t *testing.T, name string, data []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// decodeStrict decodes one document into its k8s.io/api type, rejecting
// unknown and duplicate fields: a misspelt field would otherwise be
// silently dropped by the API server.
func decodeStrict(t *testing.T, name string, doc []byte) runtime.Object {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	obj, err := scheme.New(tm.GroupVersionKind())
	if err != nil {
		t.Fatalf("%s: apiVersion %q kind %q: %v", name, tm.APIVersion, tm.Kind, err)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("%s: %s %s: %v", name, tm.APIVersion, tm.Kind, err)
	}
	return obj
}

// manifests is what `kubectl apply -k deploy/kubernetes` would send.
type manifests struct {
	StatefulSet *appsv1.StatefulSet
	Services    []*corev1.Service
	Secrets     []*corev1.Secret
	PDBs        []*policyv1.PodDisruptionBudget
	Rendered    [][]byte          // every object of the kustomize output, as YAML
	Raw         map[string][]byte // file name → content
	Kust        kusttypes.Kustomization
}

// webEnv is the git-ignored file the Secret is generated from, as the README
// tells an operator to write it; the tests render with this stand-in.
const (
	webEnvFile     = "web.env"
	webEnvPassword = "kustomize-test-password"
)

// renderKustomization runs kustomize on a copy of dir (in memory), with
// extra files added, as `kubectl apply -k` would on dir.
func renderKustomization(t *testing.T, dir string, extra map[string]string) ([]byte, error) {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) == ".env" {
			continue // the operator's own web.env, if any, is not the test's
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := fsys.WriteFile(filepath.Join("/k", e.Name()), b); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range extra {
		if err := fsys.WriteFile(filepath.Join("/k", name), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	rendered, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, "/k")
	if err != nil {
		return nil, err
	}
	return rendered.AsYaml()
}

func loadManifests(t *testing.T) manifests {
	t.Helper()
	return loadManifestsFrom(t, kubeDir, map[string]string{webEnvFile: "WEB_PASSWORD=" + webEnvPassword + "\n"})
}

// loadManifestsFrom reads and renders the kustomization in rel (a folder of
// the repository), with the stand-ins of its git-ignored files in extra.
func loadManifestsFrom(t *testing.T, rel string, extra map[string]string) manifests {
	t.Helper()
	kubeDir := rel
	dir := filepath.Join(repoRoot(t), filepath.FromSlash(rel))
	m := manifests{Raw: map[string][]byte{}}

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); ext == ".yaml" || ext == ".yml" {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			m.Raw[e.Name()] = b
		}
	}
	kust, ok := m.Raw["kustomization.yaml"]
	if !ok {
		t.Fatalf("%s: no kustomization.yaml", kubeDir)
	}
	if err := yaml.UnmarshalStrict(kust, &m.Kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	for name, b := range m.Raw {
		if name == "kustomization.yaml" {
			continue
		}
		if !slices.Contains(m.Kust.Resources, name) {
			t.Errorf("%s is not listed in kustomization.yaml's resources: kubectl apply -k would skip it", name)
		}
		for i, doc := range splitYAML(t, name, b) {
			decodeStrict(t, name+"#"+strconv.Itoa(i+1), doc)
		}
	}

	// Render as kubectl apply -k does and check what comes out.
	out, err := renderKustomization(t, dir, extra)
	if err != nil {
		t.Fatalf("kustomize build %s (with stand-ins of %v): %v", kubeDir, slices.Sorted(maps.Keys(extra)), err)
	}
	for i, doc := range splitYAML(t, "kustomize output", out) {
		m.Rendered = append(m.Rendered, doc)
		switch o := decodeStrict(t, "kustomize output #"+strconv.Itoa(i+1), doc).(type) {
		case *appsv1.StatefulSet:
			if m.StatefulSet != nil {
				t.Fatalf("two StatefulSets: %s and %s", m.StatefulSet.Name, o.Name)
			}
			m.StatefulSet = o
		case *corev1.Service:
			m.Services = append(m.Services, o)
		case *corev1.Secret:
			m.Secrets = append(m.Secrets, o)
		case *policyv1.PodDisruptionBudget:
			m.PDBs = append(m.PDBs, o)
		}
	}
	if m.StatefulSet == nil {
		t.Fatal("kustomize output has no StatefulSet")
	}
	return m
}

func TestKubernetes(t *testing.T) {
	m := loadManifests(t)
	img := parseDockerfile(t)
	defaults := readServerDefaults(t)
	sts := m.StatefulSet
	pod := sts.Spec.Template.Spec

	t.Run("single replica", func(t *testing.T) {
		if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 1 {
			t.Fatalf("replicas %v, want 1: two replicas are two independent lock tables", sts.Spec.Replicas)
		}
		// The reason must stay next to the number, where someone about to
		// scale it up will read it.
		lines := strings.Split(string(m.Raw["statefulset.yaml"]), "\n")
		i := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "replicas: 1" })
		if i < 1 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
			t.Error("statefulset.yaml: `replicas: 1` has no comment above it saying why")
		}
		if sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector); err != nil || !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
			t.Errorf("selector %v does not match the pod labels %v (%v)", sts.Spec.Selector, sts.Spec.Template.Labels, err)
		}
	})

	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	webPort, _ := strconv.Atoi(defaults.WebPort)
	lockPort, _ := strconv.Atoi(defaults.LockPort)

	t.Run("ports and environment", func(t *testing.T) {
		if ports["lock"] != int32(lockPort) || ports["web"] != int32(webPort) {
			t.Errorf("container ports %v, want lock=%d web=%d (the server's defaults; BIND_ADDRESS/WEB_ADDRESS unset)",
				ports, lockPort, webPort)
		}
		for _, e := range c.Env {
			if e.Name == "BIND_ADDRESS" || e.Name == "WEB_ADDRESS" {
				t.Errorf("env %s is set: the ports, probes and Services assume the defaults", e.Name)
			}
		}
		name, _, _ := strings.Cut(c.Image, ":")
		if !slices.ContainsFunc(m.Kust.Images, func(i kusttypes.Image) bool { return i.NewName == name || i.Name == name }) {
			t.Errorf("image %q has no entry under kustomization.yaml images to point it at a pushed image", c.Image)
		}
	})

	t.Run("persistence", func(t *testing.T) {
		dataPath := img.Env["DATA_PATH"]
		for _, e := range c.Env {
			if e.Name == "DATA_PATH" {
				dataPath = e.Value
			}
		}
		if dataPath == "" {
			t.Fatal("DATA_PATH is unset: the lock table would be lost on every restart")
		}
		var claim string
		for _, vm := range c.VolumeMounts {
			if vm.MountPath == path.Dir(dataPath) && !vm.ReadOnly {
				claim = vm.Name
			}
		}
		i := slices.IndexFunc(sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == claim })
		if claim == "" || i < 0 {
			t.Fatalf("the folder of DATA_PATH %s is not a writable mount of a volumeClaimTemplate", dataPath)
		}
		pvc := sts.Spec.VolumeClaimTemplates[i]
		if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.IsZero() {
			t.Errorf("volumeClaimTemplate %s requests no storage", claim)
		} else if q.Cmp(resource.MustParse("1Gi")) != 0 {
			t.Errorf("volumeClaimTemplate %s requests %s, the README says 1Gi", claim, q.String())
		}
		// The README names the pod's claim as the StatefulSet controller does.
		if got := pvc.Name + "-" + sts.Name + "-0"; got != "data-locking-center-0" {
			t.Errorf("the first pod's claim is %s, the README says data-locking-center-0", got)
		}
		if !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOnce) {
			t.Errorf("volumeClaimTemplate %s access modes %v, want ReadWriteOnce", claim, pvc.Spec.AccessModes)
		}
	})

	t.Run("security", func(t *testing.T) {
		uid, err := imageUID(img.User)
		if err != nil {
			t.Fatal(err)
		}
		psc, csc := pod.SecurityContext, c.SecurityContext
		if psc == nil || csc == nil {
			t.Fatal("pod or container securityContext missing")
		}
		if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Error("runAsNonRoot is not true")
		}
		if psc.RunAsUser == nil || *psc.RunAsUser != uid {
			t.Errorf("runAsUser %v, want the image's USER %d", psc.RunAsUser, uid)
		}
		if psc.FSGroup == nil {
			t.Error("no fsGroup: the non-root user could not write the volume")
		}
		if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
			t.Error("readOnlyRootFilesystem is not true")
		}
		if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
			t.Error("allowPrivilegeEscalation is not false")
		}
		if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
			t.Error("capabilities do not drop ALL")
		}
	})

	t.Run("resources", func(t *testing.T) {
		r := c.Resources
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := r.Requests[name]; !ok || q.IsZero() {
				t.Errorf("no %s request", name)
			}
		}
		if q, ok := r.Limits[corev1.ResourceMemory]; !ok || q.IsZero() {
			t.Error("no memory limit")
		}
	})

	t.Run("probes", func(t *testing.T) {
		for _, p := range []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("no HTTP %s probe", p.name)
				continue
			}
			if p.probe.HTTPGet.Path != p.path {
				t.Errorf("%s probe path %q, want %s", p.name, p.probe.HTTPGet.Path, p.path)
			}
			if got := resolvePort(p.probe.HTTPGet.Port, ports); got != int32(webPort) {
				t.Errorf("%s probe port %s resolves to %d, want the web port %d", p.name, p.probe.HTTPGet.Port.String(), got, webPort)
			}
		}
	})

	t.Run("scrape annotations", func(t *testing.T) {
		a := sts.Spec.Template.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != defaults.WebPort || a["prometheus.io/path"] != "/metrics" {
			t.Errorf("pod annotations %v, want prometheus.io/scrape=true, port=%s, path=/metrics", a, defaults.WebPort)
		}
	})

	t.Run("services", func(t *testing.T) {
		// The governing Service of a StatefulSet must be headless
		// (Kubernetes' StatefulSet docs): it gives the pod its DNS name.
		if i := slices.IndexFunc(m.Services, func(s *corev1.Service) bool { return s.Name == sts.Spec.ServiceName }); i < 0 {
			t.Errorf("serviceName %q names no Service", sts.Spec.ServiceName)
		} else if ip := m.Services[i].Spec.ClusterIP; ip != corev1.ClusterIPNone {
			t.Errorf("Service %s (the StatefulSet's serviceName) has clusterIP %q, want None (headless)", sts.Spec.ServiceName, ip)
		}
		for _, s := range m.Services {
			if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
				t.Errorf("Service %s selector %v does not select the pod %v", s.Name, s.Spec.Selector, sts.Spec.Template.Labels)
			}
		}
		// The README sends clients to these names.
		for name, want := range map[string]int32{"locking-center": int32(lockPort), "locking-center-web": int32(webPort)} {
			found := false
			for _, s := range m.Services {
				for _, p := range s.Spec.Ports {
					if s.Name == name && p.Port == want && resolvePort(p.TargetPort, ports) == want {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("no Service %s exposes port %d onto the container port %d", name, want, want)
			}
		}
	})

	t.Run("secret for WEB_PASSWORD", func(t *testing.T) {
		var ref *corev1.SecretKeySelector
		for _, e := range c.Env {
			if e.Name == "WEB_PASSWORD" {
				if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					t.Fatalf("WEB_PASSWORD is not taken from a Secret: %+v", e)
				}
				ref = e.ValueFrom.SecretKeyRef
			}
		}
		if ref == nil {
			t.Fatal("no WEB_PASSWORD in the container's env: the dashboard and its reset buttons would be open to the cluster")
		}
		if ref.Optional != nil && *ref.Optional {
			t.Error("WEB_PASSWORD's secretKeyRef is optional: a missing Secret would start the server with no password")
		}
		i := slices.IndexFunc(m.Secrets, func(s *corev1.Secret) bool { return s.Name == ref.Name })
		if i < 0 {
			t.Fatalf("WEB_PASSWORD refers to Secret %q, which kustomize does not make (Secrets: %d)", ref.Name, len(m.Secrets))
		}
		if got := string(m.Secrets[i].Data[ref.Key]); got != webEnvPassword {
			t.Errorf("Secret %s key %s = %q, want the value from %s", ref.Name, ref.Key, got, webEnvFile)
		}
		if _, err := renderKustomization(t, filepath.Join(repoRoot(t), filepath.FromSlash(kubeDir)), nil); err == nil {
			t.Errorf("kustomize build succeeds without %s: the server would start without a password", webEnvFile)
		}
		for name, b := range m.Raw {
			if bytes.Contains(b, []byte(webEnvPassword)) || (name != "kustomization.yaml" && bytes.Contains(b, []byte("kind: Secret"))) {
				t.Errorf("%s carries a Secret's value; it belongs in the git-ignored %s", name, webEnvFile)
			}
		}
	})
}

// TestProbePathsOnServer runs the server and GETs the manifest's probe and
// scrape paths on its web port: a renamed route would otherwise only show as
// a pod that never gets ready.
func TestProbePathsOnServer(t *testing.T) {
	m := loadManifests(t)
	c := m.StatefulSet.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil {
		t.Fatal("HTTP probes missing (see TestKubernetes)")
	}
	bin := serverBinary(t)
	s := startServer(t, bin, imageEnv(t, parseDockerfile(t), t.TempDir()), c.ReadinessProbe.HTTPGet.Path)

	if code, err := get(s.web, c.LivenessProbe.HTTPGet.Path); err != nil || code != http.StatusOK {
		t.Errorf("liveness GET %s: %d, %v; want 200", c.LivenessProbe.HTTPGet.Path, code, err)
	}
	// The image's HEALTHCHECK with the image's WEB_ADDRESS form (no host).
	_, port, _ := strings.Cut(s.web, ":")
	hc := exec.Command(bin, "healthcheck")
	hc.Env = []string{"WEB_ADDRESS=:" + port}
	if out, err := hc.CombinedOutput(); err != nil {
		t.Errorf("`locking-center healthcheck` with WEB_ADDRESS=:%s: %v\n%s", port, err, out)
	}
	t.Run("metrics", func(t *testing.T) {
		p := m.StatefulSet.Spec.Template.Annotations["prometheus.io/path"]
		resp, err := http.Get("http://" + s.web + p)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s, %v; want 200", p, resp.Status, err)
		}
		// Every metric the alert rules use must be exposed (with DATA_PATH
		// set, as in the image), or an alert can never fire.
		for _, name := range alertMetrics.FindAllString(string(readRepoFile(t, "deploy/prometheus/alerts.yml")), -1) {
			if !regexp.MustCompile(`(?m)^` + name + `[{ ]`).Match(body) {
				t.Errorf("alerts.yml uses %s, which GET %s does not expose", name, p)
			}
		}
	})
	s.stop(t, composeStopGrace(t))
}

var alertMetrics = regexp.MustCompile(`locking_center_[a-z_]+`)

func resolvePort(p intstr.IntOrString, named map[string]int32) int32 {
	if p.Type == intstr.String {
		return named[p.StrVal]
	}
	return p.IntVal
}
