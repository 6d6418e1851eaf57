// Package kubernetes holds the manifests that run ratescope on Kubernetes
// (ratescope.yaml) and the test that decodes them strictly with the
// Kubernetes API types, so a misspelt or misplaced field fails here, not at
// kubectl apply.
package kubernetes

import (
	"bytes"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestManifestsDecodeStrictly: every document of ratescope.yaml decodes
// into its kind's API type with no unknown or duplicate field, and the
// Deployment says what the docs promise: probes on /healthz and /readyz, a
// non-root user, resources, the config folder mounted from the ConfigMap,
// and a Service whose selector finds its pods.
func TestManifestsDecodeStrictly(t *testing.T) {
	b, err := os.ReadFile("ratescope.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	var svc corev1.Service
	var cm corev1.ConfigMap
	kinds := map[string]any{"Deployment": &dep, "Service": &svc, "ConfigMap": &cm}
	seen := map[string]int{}
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("document %d: %v", i+1, err)
		}
		into, ok := kinds[meta.Kind]
		if !ok {
			t.Fatalf("document %d: kind %q, want one of Deployment, Service, ConfigMap", i+1, meta.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			t.Fatalf("document %d (%s) does not decode strictly: %v", i+1, meta.Kind, err)
		}
		seen[meta.Kind]++
	}
	for kind := range kinds {
		if seen[kind] != 1 {
			t.Fatalf("%d documents of kind %s, want 1", seen[kind], kind)
		}
	}

	spec := dep.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want GET /readyz", p)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Errorf("pod security context %+v, want non-root uid 65532 (the image's user)", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v, want CPU and memory requests and a memory limit", c.Resources)
	}
	if !strings.Contains(strings.Join(c.Args, " "), "--config /etc/ratescope/ratescope.yaml") {
		t.Errorf("args %q, want the mounted config file", c.Args)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && m.MountPath == "/etc/ratescope" && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && m.SubPath == "" {
				mounted = true // the folder, not a subPath: ConfigMap edits reach the pod
			}
		}
	}
	if !mounted {
		t.Error("the ConfigMap is not mounted as the folder /etc/ratescope (a subPath mount never sees edits)")
	}
	if _, ok := cm.Data["ratescope.yaml"]; !ok {
		t.Error("the ConfigMap has no ratescope.yaml")
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the pods do not carry", k, v)
		}
	}
}
