package deploy

import (
	"bytes"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The cluster's manifests (SPEC §8.7), beside the single node's in kubeDir.
const (
	kubeClusterDir     = "deploy/kubernetes/cluster"
	clusterEnvFile     = "cluster.env"
	clusterEnvToken    = "kustomize-test-cluster-token-0123"
	clusterEnvPassword = "kustomize-test-cluster-password"
)

func loadClusterManifests(t *testing.T) manifests {
	t.Helper()
	return loadManifestsFrom(t, kubeClusterDir, map[string]string{
		clusterEnvFile: "CLUSTER_TOKEN=" + clusterEnvToken + "\nWEB_PASSWORD=" + clusterEnvPassword + "\n",
	})
}

// expandEnv expands $(VAR) as the kubelet does with the container's
// earlier variables (a later or unknown one is left as written).
func expandEnv(value string, earlier map[string]string) string {
	for k, v := range earlier {
		value = strings.ReplaceAll(value, "$("+k+")", v)
	}
	return value
}

// TestKubernetesCluster checks the cluster's StatefulSet and what goes with
// it, as `kubectl apply -k deploy/kubernetes/cluster` renders them, against
// SPEC §8.7: three replicas started in parallel; a headless governing
// Service publishing pods that are not ready; NODE_ID from the pod's name;
// for every pod, RAFT_ADVERTISE (expanded as the kubelet does) equal to its
// stable DNS name in that Service and to its entry of CLUSTER_PEERS, which
// lists exactly the three pods; RAFT_DIR on a volume claim of each pod;
// CLUSTER_TOKEN and WEB_PASSWORD from the generated Secret; probes; the
// preStop hand-over; a PodDisruptionBudget of one; a client Service on the
// lock and web ports; and labels apart from the single node's, so that the
// two never select each other's pods.
func TestKubernetesCluster(t *testing.T) {
	m := loadClusterManifests(t)
	img := parseDockerfile(t)
	defaults := readServerDefaults(t)
	sts := m.StatefulSet
	pod := sts.Spec.Template.Spec
	podLabels := labels.Set(sts.Spec.Template.Labels)
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	env := map[string]corev1.EnvVar{}
	order := map[string]int{}
	for i, e := range c.Env {
		env[e.Name] = e
		order[e.Name] = i
	}
	raftPort, _ := strconv.Atoi(clusterRaftPort)

	t.Run("three voters in parallel", func(t *testing.T) {
		if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
			t.Fatalf("replicas %v, want 3", sts.Spec.Replicas)
		}
		if sts.Spec.PodManagementPolicy != "Parallel" {
			t.Errorf("podManagementPolicy %q, want Parallel: a pod is ready only once a quorum runs, so OrderedReady never starts pod 1", sts.Spec.PodManagementPolicy)
		}
		if sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector); err != nil || !sel.Matches(podLabels) {
			t.Errorf("selector %v does not match the pod labels %v (%v)", sts.Spec.Selector, podLabels, err)
		}
		single := loadManifests(t).StatefulSet
		if sel, _ := metav1.LabelSelectorAsSelector(single.Spec.Selector); sel.Matches(podLabels) {
			t.Errorf("the single node's selector %v matches the cluster's pods %v", single.Spec.Selector, podLabels)
		}
		if sel, _ := metav1.LabelSelectorAsSelector(sts.Spec.Selector); sel.Matches(labels.Set(single.Spec.Template.Labels)) {
			t.Errorf("the cluster's selector %v matches the single node's pods", sts.Spec.Selector)
		}
		if sts.Name == single.Name {
			t.Errorf("the StatefulSet is named %s, as the single node's: applying one would change the other", sts.Name)
		}
	})

	t.Run("headless peers Service", func(t *testing.T) {
		i := slices.IndexFunc(m.Services, func(s *corev1.Service) bool { return s.Name == sts.Spec.ServiceName })
		if i < 0 {
			t.Fatalf("serviceName %q names no Service", sts.Spec.ServiceName)
		}
		s := m.Services[i]
		if s.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("Service %s has clusterIP %q, want None (headless)", s.Name, s.Spec.ClusterIP)
		}
		if !s.Spec.PublishNotReadyAddresses {
			t.Errorf("Service %s does not publish not-ready addresses: the pods could not find each other to elect the leader that makes them ready", s.Name)
		}
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
			t.Errorf("Service %s selector %v does not select the pods", s.Name, s.Spec.Selector)
		}
		if ports["raft"] != int32(raftPort) {
			t.Errorf("container port raft = %d, want the cluster port %d", ports["raft"], raftPort)
		}
	})

	t.Run("node identity and peers", func(t *testing.T) {
		id, ok := env["NODE_ID"]
		if !ok || id.ValueFrom == nil || id.ValueFrom.FieldRef == nil || id.ValueFrom.FieldRef.FieldPath != "metadata.name" {
			t.Fatalf("NODE_ID %+v: want it from the pod's name (fieldRef metadata.name)", id)
		}
		adv, ok := env["RAFT_ADVERTISE"]
		if !ok || adv.ValueFrom != nil {
			t.Fatalf("RAFT_ADVERTISE %+v: want a value naming the pod's DNS name", adv)
		}
		if order["RAFT_ADVERTISE"] < order["NODE_ID"] {
			t.Error("RAFT_ADVERTISE comes before NODE_ID: the kubelet expands $(NODE_ID) only from earlier variables")
		}
		peers := map[string]string{}
		for item := range strings.SplitSeq(env["CLUSTER_PEERS"].Value, ",") {
			pid, addr, ok := strings.Cut(item, "=")
			if !ok {
				t.Fatalf("CLUSTER_PEERS item %q is not id=host:port", item)
			}
			peers[pid] = addr
		}
		if len(peers) != int(*sts.Spec.Replicas) {
			t.Errorf("CLUSTER_PEERS lists %d nodes, the StatefulSet runs %d", len(peers), *sts.Spec.Replicas)
		}
		for i := range int(*sts.Spec.Replicas) {
			podName := fmt.Sprintf("%s-%d", sts.Name, i)
			dns := podName + "." + sts.Spec.ServiceName
			got := expandEnv(adv.Value, map[string]string{"NODE_ID": podName})
			if want := dns + ":" + clusterRaftPort; got != want {
				t.Errorf("pod %s: RAFT_ADVERTISE %q, want its stable name %s", podName, got, want)
			}
			if peers[podName] != got {
				t.Errorf("pod %s: CLUSTER_PEERS has %q for it, RAFT_ADVERTISE says %q (the node refuses to start)", podName, peers[podName], got)
			}
		}
		if _, ok := env["CLUSTER_JOIN"]; ok {
			t.Error("CLUSTER_JOIN is set beside CLUSTER_PEERS")
		}
		for _, k := range []string{"RAFT_ADDRESS", "BIND_ADDRESS", "WEB_ADDRESS"} {
			if _, ok := env[k]; ok {
				t.Errorf("env %s is set: the ports, probes and Services assume the defaults", k)
			}
		}
	})

	t.Run("raft state on a claim", func(t *testing.T) {
		if dp, ok := env["DATA_PATH"]; !ok || dp.Value != "" || dp.ValueFrom != nil {
			t.Errorf("DATA_PATH %+v: the image sets %s, which a cluster node refuses; want it set empty", dp, img.Env["DATA_PATH"])
		}
		dir := env["RAFT_DIR"].Value
		var claim string
		for _, vm := range c.VolumeMounts {
			if (dir == vm.MountPath || strings.HasPrefix(dir, strings.TrimSuffix(vm.MountPath, "/")+"/")) && !vm.ReadOnly {
				claim = vm.Name
			}
		}
		i := slices.IndexFunc(sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == claim })
		if dir == "" || !path.IsAbs(dir) || i < 0 {
			t.Fatalf("RAFT_DIR %q is not on a writable mount of a volumeClaimTemplate: a node that forgets its vote can elect two leaders", dir)
		}
		pvc := sts.Spec.VolumeClaimTemplates[i]
		if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.IsZero() {
			t.Errorf("volumeClaimTemplate %s requests no storage", claim)
		}
		if !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOnce) {
			t.Errorf("volumeClaimTemplate %s access modes %v, want ReadWriteOnce", claim, pvc.Spec.AccessModes)
		}
		if pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil {
			t.Error("no fsGroup: the non-root user could not write the claim")
		}
	})

	t.Run("secrets", func(t *testing.T) {
		for key, want := range map[string]string{"CLUSTER_TOKEN": clusterEnvToken, "WEB_PASSWORD": clusterEnvPassword} {
			e, ok := env[key]
			if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s is not taken from a Secret: %+v", key, e)
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			if ref.Optional != nil && *ref.Optional {
				t.Errorf("%s's secretKeyRef is optional", key)
			}
			i := slices.IndexFunc(m.Secrets, func(s *corev1.Secret) bool { return s.Name == ref.Name })
			if i < 0 {
				t.Errorf("%s refers to Secret %q, which kustomize does not make", key, ref.Name)
			} else if got := string(m.Secrets[i].Data[ref.Key]); got != want {
				t.Errorf("Secret %s key %s = %q, want the value from %s", ref.Name, ref.Key, got, clusterEnvFile)
			}
		}
		if _, err := renderKustomization(t, filepath.Join(repoRoot(t), filepath.FromSlash(kubeClusterDir)), nil); err == nil {
			t.Errorf("kustomize build succeeds without %s", clusterEnvFile)
		}
		for name, b := range m.Raw {
			if bytes.Contains(b, []byte(clusterEnvToken)) || (name != "kustomization.yaml" && bytes.Contains(b, []byte("kind: Secret"))) {
				t.Errorf("%s carries a Secret's value; it belongs in the git-ignored %s", name, clusterEnvFile)
			}
		}
		if !strings.Contains(string(readRepoFile(t, "deploy/kubernetes/.gitignore")), "cluster/"+clusterEnvFile) {
			t.Errorf("deploy/kubernetes/.gitignore does not ignore cluster/%s", clusterEnvFile)
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
			if got := resolvePort(p.probe.HTTPGet.Port, ports); strconv.Itoa(int(got)) != defaults.WebPort {
				t.Errorf("%s probe port resolves to %d, want the web port %s", p.name, got, defaults.WebPort)
			}
		}
	})

	t.Run("preStop hands leadership over", func(t *testing.T) {
		if len(img.Entrypoint) == 0 {
			t.Fatal("the Dockerfile has no ENTRYPOINT")
		}
		want := []string{img.Entrypoint[0], "handover"}
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
			t.Fatalf("no exec preStop hook; want %q", want)
		}
		if got := c.Lifecycle.PreStop.Exec.Command; !slices.Equal(got, want) {
			t.Errorf("preStop %q, want %q (the image's binary)", got, want)
		}
		if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 10 {
			t.Errorf("terminationGracePeriodSeconds %v: the hand-over and the shutdown need more", g)
		}
	})

	t.Run("disruption budget", func(t *testing.T) {
		if len(m.PDBs) != 1 {
			t.Fatalf("%d PodDisruptionBudgets, want 1", len(m.PDBs))
		}
		pdb := m.PDBs[0]
		if mu := pdb.Spec.MaxUnavailable; mu == nil || *mu != intstr.FromInt32(1) {
			t.Errorf("maxUnavailable %v, want 1: two pods down is a lost quorum", mu)
		}
		if pdb.Spec.MinAvailable != nil {
			t.Errorf("minAvailable %v is set beside maxUnavailable", pdb.Spec.MinAvailable)
		}
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(podLabels) {
			t.Errorf("PDB selector %v does not select the pods (%v)", pdb.Spec.Selector, err)
		}
	})

	t.Run("client Service", func(t *testing.T) {
		found := false
		for _, s := range m.Services {
			if s.Spec.ClusterIP == corev1.ClusterIPNone || len(s.Spec.Selector) == 0 {
				continue
			}
			got := map[int32]int32{}
			for _, p := range s.Spec.Ports {
				got[p.Port] = resolvePort(p.TargetPort, ports)
			}
			lock, _ := strconv.Atoi(defaults.LockPort)
			web, _ := strconv.Atoi(defaults.WebPort)
			if got[int32(lock)] == int32(lock) && got[int32(web)] == int32(web) &&
				labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
				found = true
			}
		}
		if !found {
			t.Errorf("no Service selects the pods on %s and %s", defaults.LockPort, defaults.WebPort)
		}
	})

	t.Run("security", func(t *testing.T) {
		uid, err := imageUID(img.User)
		if err != nil {
			t.Fatal(err)
		}
		psc, csc := pod.SecurityContext, c.SecurityContext
		if psc == nil || csc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != uid {
			t.Fatalf("pod securityContext %+v: want runAsNonRoot and the image's UID %d", psc, uid)
		}
		if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem || csc.AllowPrivilegeEscalation == nil ||
			*csc.AllowPrivilegeEscalation || csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
			t.Errorf("container securityContext %+v: want a read-only root, no escalation, ALL dropped", csc)
		}
	})
}

// TestKubernetesClusterSchemas validates every object of the cluster's
// kustomization against the API's OpenAPI schemas, as
// TestKubernetesSchemas does for the single node's; broken copies must fail.
func TestKubernetesClusterSchemas(t *testing.T) {
	m := loadClusterManifests(t)
	a := newAPISchemas(t)
	for i, doc := range m.Rendered {
		var meta struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if err := a.validate(doc); err != nil {
			t.Errorf("kustomize output #%d, %s %s: %v", i+1, meta.Kind, meta.Metadata.Name, err)
		}
	}
	t.Logf("%d objects validated", len(m.Rendered))
	for _, c := range []struct{ name, file, from, to string }{
		{"preStop command as a string", "statefulset.yaml", `command: ["/locking-center", "handover"]`, `command: /locking-center handover`},
		{"fieldRef without fieldPath", "statefulset.yaml", "fieldPath: metadata.name", "apiVersion: v1"},
		{"maxUnavailable as a list", "pdb.yaml", "maxUnavailable: 1", "maxUnavailable: [1]"},
	} {
		src := string(m.Raw[c.file])
		if !strings.Contains(src, c.from) {
			t.Fatalf("%s: %s no longer contains %q; update this test", c.name, c.file, c.from)
		}
		if err := a.validate([]byte(strings.Replace(src, c.from, c.to, 1))); err == nil {
			t.Errorf("%s: the schema accepts it", c.name)
		}
	}
}
