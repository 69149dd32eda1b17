package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/mod/modfile"
	"sigs.k8s.io/yaml"
)

// kubernetesOpenAPI returns the folder of the OpenAPI v3 documents that
// Kubernetes publishes for its API (api/openapi-spec/v3 of the
// k8s.io/kubernetes module), for the release whose k8s.io/api this module
// decodes the manifests with: k8s.io/api v0.X.Y is Kubernetes v1.X.Y. The
// module comes through the Go module proxy like any other dependency and is
// read from the module cache (deploy/ci-setup.sh downloads it beforehand).
func kubernetesOpenAPI(t *testing.T) string {
	t.Helper()
	mod, err := modfile.ParseLax("go.mod", readRepoFile(t, "deploy/go.mod"), nil)
	if err != nil {
		t.Fatalf("deploy/go.mod: %v", err)
	}
	api := ""
	for _, r := range mod.Require {
		if r.Mod.Path == "k8s.io/api" {
			api = r.Mod.Version
		}
	}
	if !strings.HasPrefix(api, "v0.") {
		t.Fatalf("deploy/go.mod: k8s.io/api %q, want v0.X.Y", api)
	}
	release := "v1." + strings.TrimPrefix(api, "v0.")
	out, err := exec.Command("go", "mod", "download", "-json", "k8s.io/kubernetes@"+release).Output()
	if err != nil {
		t.Fatalf("go mod download k8s.io/kubernetes@%s: %v\n%s", release, err, out)
	}
	var dl struct{ Dir, Error string }
	if err := json.Unmarshal(out, &dl); err != nil || dl.Dir == "" {
		t.Fatalf("go mod download k8s.io/kubernetes@%s: %v %s", release, err, dl.Error)
	}
	return filepath.Join(dl.Dir, "api", "openapi-spec", "v3")
}

// apiSchemas compiles the schema of each kind from Kubernetes' OpenAPI
// documents, loading each document once.
type apiSchemas struct {
	t        *testing.T
	dir      string
	compiler *jsonschema.Compiler
	docs     map[string]map[string]any // document URL → its components.schemas
}

func newAPISchemas(t *testing.T) *apiSchemas {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020) // OpenAPI 3's schemas are this draft's subset
	return &apiSchemas{t: t, dir: kubernetesOpenAPI(t), compiler: c, docs: map[string]map[string]any{}}
}

// forKind returns the compiled schema of apiVersion/kind, found by the
// x-kubernetes-group-version-kind each top-level schema carries.
func (a *apiSchemas) forKind(apiVersion, kind string) *jsonschema.Schema {
	t := a.t
	t.Helper()
	group, version, ok := strings.Cut(apiVersion, "/")
	file := "apis__" + group + "__" + version + "_openapi.json"
	if !ok {
		group, version, file = "", apiVersion, "api__"+apiVersion+"_openapi.json"
	}
	url := "file:///kubernetes/" + file
	schemas, loaded := a.docs[url]
	if !loaded {
		f, err := os.Open(filepath.Join(a.dir, file))
		if err != nil {
			t.Fatalf("%s %s: no OpenAPI document: %v", apiVersion, kind, err)
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if err := a.compiler.AddResource(url, doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		components, _ := doc.(map[string]any)["components"].(map[string]any)
		schemas, _ = components["schemas"].(map[string]any)
		a.docs[url] = schemas
	}
	for name, s := range schemas {
		gvks, _ := s.(map[string]any)["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			g, _ := g.(map[string]any)
			if g["group"] == group && g["version"] == version && g["kind"] == kind {
				sch, err := a.compiler.Compile(url + "#/components/schemas/" + name)
				if err != nil {
					t.Fatalf("compile %s: %v", name, err)
				}
				return sch
			}
		}
	}
	t.Fatalf("%s: no schema for %s %s", file, apiVersion, kind)
	return nil
}

// validate checks one object, as YAML, against its kind's schema.
func (a *apiSchemas) validate(doc []byte) error {
	a.t.Helper()
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return err
	}
	obj, _ := inst.(map[string]any)
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	return a.forKind(apiVersion, kind).Validate(inst)
}

// TestKubernetesSchemas validates every object `kubectl apply -k` would send
// against the API's own OpenAPI schemas (types, required fields, formats), as
// kubeconform does; unknown fields are TestKubernetes' strict decoding's to
// catch. A broken copy of the StatefulSet must fail, so that the check is
// known to bite.
func TestKubernetesSchemas(t *testing.T) {
	m := loadManifests(t)
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
	t.Logf("%d objects validated against the OpenAPI schemas in %s", len(m.Rendered), a.dir)

	t.Run("a broken manifest fails", func(t *testing.T) {
		for _, c := range []struct{ name, from, to string }{
			{"replicas as a string", "replicas: 1\n", "replicas: one\n"},
			{"port number as a name", "containerPort: 22119\n", "containerPort: lock\n"},
			{"container without a name", "- name: locking-center\n          # Build", "- # Build"},
		} {
			src := string(m.Raw["statefulset.yaml"])
			if !strings.Contains(src, c.from) {
				t.Fatalf("%s: statefulset.yaml no longer contains %q; update this test", c.name, c.from)
			}
			if err := a.validate([]byte(strings.Replace(src, c.from, c.to, 1))); err == nil {
				t.Errorf("%s: the schema accepts it", c.name)
			}
		}
	})
}
