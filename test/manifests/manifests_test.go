// Package manifests checks what users install: the Helm chart and the kustomize trees
// render, lint, stay in sync with the generated CRD and RBAC, and are accepted by a real
// kube-apiserver (server-side dry run, so CRD schemas and CEL rules are enforced).
package manifests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

func tool(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	bin := filepath.Join(testsupport.BinDir(t), name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s not built: run `make tools`", bin)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = testsupport.RepoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode rendered manifests: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// dryRunApply server-side-applies every object with dryRun=All: the apiserver runs
// defaulting, OpenAPI validation and CEL rules, and stores nothing. CRDs in the set
// are applied for real first, so the objects that use them can be checked.
func dryRunApply(t *testing.T, c client.Client, objs []*unstructured.Unstructured, defaultNamespace string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ensureNamespace(t, c, defaultNamespace)
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			ensureNamespace(t, c, o.GetName())
		}
	}
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Namespace" {
			continue
		}
		mapping, err := c.RESTMapper().RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
		if err != nil {
			t.Errorf("%s %s: kind not served: %v", o.GetKind(), o.GetName(), err)
			continue
		}
		if mapping.Scope.Name() == "namespace" && o.GetNamespace() == "" {
			o.SetNamespace(defaultNamespace)
		}
		//nolint:staticcheck // unstructured objects have no apply configuration type
		err = c.Patch(ctx, o, client.Apply, client.FieldOwner("manifests-test"), client.ForceOwnership, client.DryRunAll)
		if err != nil {
			t.Errorf("%s %s/%s rejected: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

func ensureNamespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

func apiClient(t *testing.T) client.Client {
	t.Helper()
	root := testsupport.RepoRoot(t)
	testsupport.InstallCRDs(t, filepath.Join(root, "test", "manifests", "testdata", "monitoring-crds.yaml"))
	testsupport.InstallCRDs(t, gatewayCRDs(t))
	c, err := client.New(testsupport.StartEnvtest(t), client.Options{})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c
}

func gatewayCRDs(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatalf("locate the gateway-api module: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard")
}

func TestHelmChartLintsAndApplies(t *testing.T) {
	tool(t, "helm", "lint", "--strict", "charts/hookkeeper")
	rendered := tool(t, "helm", "template", "hookkeeper", "charts/hookkeeper", "--namespace", "hookkeeper-system",
		"--include-crds", "--set", "monitoring.serviceMonitor.enabled=true",
		"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboards.enabled=true",
		"--set", "monitoring.labels.release=kube-prometheus-stack", "--set", "monitoring.labels.team=payments")
	objs := decode(t, rendered)
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
		switch o.GetKind() {
		case "ServiceMonitor", "PrometheusRule":
			// monitoring.labels reach the chart's own monitoring objects ...
			if o.GetLabels()["release"] != "kube-prometheus-stack" || o.GetLabels()["team"] != "payments" {
				t.Errorf("%s labels = %v, want monitoring.labels among them", o.GetKind(), o.GetLabels())
			}
		case "Deployment":
			// ... and the manager, for the per-endpoint ones, in the form it parses.
			args, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			const want = "--monitoring-labels=release=kube-prometheus-stack,team=payments"
			if !strings.Contains(fmt.Sprint(args), want) {
				t.Errorf("manager container = %v, want the arg %s", args, want)
			}
			if _, err := resources.ParseMonitoringLabels(strings.TrimPrefix(want, "--monitoring-labels=")); err != nil {
				t.Error(err)
			}
		}
	}
	for _, want := range []string{"CustomResourceDefinition", "ClusterRole", "Deployment", "ServiceMonitor", "PrometheusRule", "ConfigMap"} {
		if !kinds[want] {
			t.Errorf("chart with monitoring on rendered no %s", want)
		}
	}
	dryRunApply(t, apiClient(t), objs, "hookkeeper-system")
}

func TestKustomizeDefaultBuildsAndApplies(t *testing.T) {
	objs := decode(t, tool(t, "kustomize", "build", "config/default"))
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	for _, want := range []string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Deployment", "ServiceAccount"} {
		if !kinds[want] {
			t.Errorf("config/default has no %s", want)
		}
	}
	dryRunApply(t, apiClient(t), objs, "hookkeeper-system")
}

// Every sample must pass the CRD's schema and CEL rules (admission) and what only Go
// checks (CEL expressions compile, templates are valid), as the operator would.
func TestSamplesAreAccepted(t *testing.T) {
	c := apiClient(t)
	samples := decode(t, tool(t, "kustomize", "build", "config/samples"))
	dryRunApply(t, c, samples, "shop")
	dryRunApply(t, c, decode(t, tool(t, "kustomize", "build", "config/samples/gateway")), "shop")
	// One file per provider in config/samples/providers, each applied on its own
	// (kubectl apply -f FILE), so adding a provider adds a file and lists it nowhere.
	providerSamples, err := filepath.Glob(filepath.Join(testsupport.RepoRoot(t), "config", "samples", "providers", "*.yaml"))
	if err != nil || len(providerSamples) == 0 {
		t.Fatalf("config/samples/providers: %v (%d files)", err, len(providerSamples))
	}
	for _, path := range providerSamples {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		objs := decode(t, data)
		dryRunApply(t, c, objs, "shop")
		samples = append(samples, objs...)
	}

	endpoints := 0
	for _, o := range samples {
		if o.GetKind() != "WebhookEndpoint" {
			continue
		}
		endpoints++
		var we v1alpha1.WebhookEndpoint
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &we); err != nil {
			t.Fatalf("sample %s: %v", o.GetName(), err)
		}
		if err := config.Validate(&we); err != nil {
			t.Errorf("sample %s is not a valid configuration: %v", o.GetName(), err)
		}
	}
	if endpoints < 8+len(providerSamples) {
		t.Errorf("config/samples has %d WebhookEndpoints; want one per provider plus the orders example", endpoints)
	}
}

// The quick start (docs/quickstart.md) is accepted by the apiserver and needs nothing
// it does not create: the endpoint's database Secret is the one CloudNativePG makes for
// its Cluster (<name>-app, key uri, database and owner app), its signing Secret and key
// are in the set, its sink is a Service in the set whose selector matches the echo
// Deployment's pods on the named port, and the entities are managed and created on the
// first event (no app table to create).
func TestQuickstartNeedsNothingElse(t *testing.T) {
	c := apiClient(t)
	testsupport.InstallCRDs(t, filepath.Join(testsupport.RepoRoot(t), "test", "manifests", "testdata", "cnpg-crds.yaml"))
	objs := decode(t, tool(t, "kustomize", "build", "config/samples/quickstart"))
	dryRunApply(t, c, objs, "shop")

	byKind := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()] = append(byKind[o.GetKind()], o)
	}
	for kind, n := range map[string]int{"Cluster": 1, "WebhookEndpoint": 1, "Deployment": 1, "Service": 1, "Secret": 1} {
		if len(byKind[kind]) != n {
			t.Fatalf("config/samples/quickstart has %d %s, want %d", len(byKind[kind]), kind, n)
		}
	}
	var we v1alpha1.WebhookEndpoint
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byKind["WebhookEndpoint"][0].Object, &we); err != nil {
		t.Fatal(err)
	}
	if err := config.Validate(&we); err != nil {
		t.Errorf("the quick start's WebhookEndpoint is not a valid configuration: %v", err)
	}
	if we.Spec.Entity.Table != nil || we.Spec.Entity.OnUnmatched != v1alpha1.UnmatchedCreate {
		t.Errorf("entity %+v: want the managed table (no entity.table) with onUnmatched Create", we.Spec.Entity)
	}

	pg := byKind["Cluster"][0]
	db := we.Spec.Database.URLSecretRef
	if want := pg.GetName() + "-app"; db.Name != want || db.Key != "uri" {
		t.Errorf("database.urlSecretRef %s/%s, want %s/uri, the Secret CloudNativePG creates for Cluster %s", db.Name, db.Key, want, pg.GetName())
	}
	for field, want := range map[string]string{"database": "app", "owner": "app"} {
		if got, _, _ := unstructured.NestedString(pg.Object, "spec", "bootstrap", "initdb", field); got != want {
			t.Errorf("Cluster spec.bootstrap.initdb.%s %q, want %q (what the uri names)", field, got, want)
		}
	}

	secret := byKind["Secret"][0]
	for _, ref := range we.Spec.SigningSecrets {
		k := ref.SecretKeyRef
		// The dry run returned the Secret as stored: stringData folded into data.
		_, inString, _ := unstructured.NestedString(secret.Object, "stringData", k.Key)
		_, inData, _ := unstructured.NestedString(secret.Object, "data", k.Key)
		if k.Name != secret.GetName() || !inString && !inData {
			t.Errorf("signing secret %s/%s is not in the quick start", k.Name, k.Key)
		}
	}

	sink := we.Spec.Delivery.Sink.ServiceRef
	svc, deploy := byKind["Service"][0], byKind["Deployment"][0]
	if sink == nil || sink.Name != svc.GetName() {
		t.Fatalf("sink %+v, want serviceRef %s", we.Spec.Delivery.Sink, svc.GetName())
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	found := false
	for _, p := range ports {
		if port, _, _ := unstructured.NestedInt64(p.(map[string]any), "port"); port == int64(sink.Port) {
			found = true
		}
	}
	if !found {
		t.Errorf("Service %s has no port %d", svc.GetName(), sink.Port)
	}
	selector, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	podLabels, _, _ := unstructured.NestedStringMap(deploy.Object, "spec", "template", "metadata", "labels")
	for k, v := range selector {
		if podLabels[k] != v {
			t.Errorf("Service %s selects %s=%s, which the sink's pods do not carry (%v)", svc.GetName(), k, v, podLabels)
		}
	}
}

// Endpoints declared in chart values, one per exposure kind, render as WebhookEndpoints
// that admission and config.Validate accept, with their exposure intact.
func TestHelmChartEndpoints(t *testing.T) {
	rendered := tool(t, "helm", "template", "hookkeeper", "charts/hookkeeper", "--namespace", "hookkeeper-system",
		"--values", "test/manifests/testdata/values-endpoints.yaml", "--show-only", "templates/webhookendpoints.yaml")
	objs := decode(t, rendered)
	if len(objs) != 2 {
		t.Fatalf("rendered %d WebhookEndpoints, want 2", len(objs))
	}
	exposures := map[string]string{}
	for _, o := range objs {
		var we v1alpha1.WebhookEndpoint
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &we); err != nil {
			t.Fatalf("%s: %v", o.GetName(), err)
		}
		if err := config.Validate(&we); err != nil {
			t.Errorf("%s: %v", o.GetName(), err)
		}
		if len(we.Spec.StateMachine.Transitions[0].On) == 0 {
			t.Errorf("%s: the quoted \"on\" key did not survive rendering", o.GetName())
		}
		switch {
		case we.Spec.Exposure != nil && we.Spec.Exposure.HTTPRoute != nil:
			exposures[we.Name] = "httpRoute"
		case we.Spec.Exposure != nil && we.Spec.Exposure.Ingress != nil:
			exposures[we.Name] = "ingress"
		}
	}
	if exposures["orders-payments"] != "httpRoute" || exposures["github-ci"] != "ingress" {
		t.Errorf("exposures rendered as %v", exposures)
	}
	c := apiClient(t)
	ensureNamespace(t, c, "ci")
	dryRunApply(t, c, objs, "shop")
}
