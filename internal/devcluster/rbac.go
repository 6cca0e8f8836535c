package devcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/hookkeeper/hookkeeper/internal/demo"
)

// The operator runs in the local cluster as the ServiceAccount the installer creates,
// with the RBAC the installer applies: the resources of config/rbac/kustomization.yaml,
// read from the repository, in OperatorNamespace (config/default's namespace).
const (
	// OperatorNamespace is the namespace of the operator's ServiceAccount and of its
	// namespaced Roles (leader election, hash key), as config/default installs them.
	OperatorNamespace = "hookkeeper-system"
	// OperatorServiceAccount is the operator's ServiceAccount (config/rbac/service_account.yaml).
	OperatorServiceAccount = "controller-manager"

	// rbacKustomization lists the installer's RBAC files, relative to the repository root.
	rbacKustomization = "config/rbac/kustomization.yaml"
	// rbacPlaceholderNamespace is the namespace config/rbac is written for; config/default
	// replaces it with its own namespace, as InstallOperatorRBAC does.
	rbacPlaceholderNamespace = "system"
	// rbacFieldOwner is the server-side apply field manager of the installed RBAC.
	rbacFieldOwner = "hookkeeper-dev"
)

// OperatorUser is the user name the operator's requests are authorised as:
// system:serviceaccount:hookkeeper-system:controller-manager.
func OperatorUser() string {
	return "system:serviceaccount:" + OperatorNamespace + ":" + OperatorServiceAccount
}

// OperatorConfig returns admin impersonating the operator's ServiceAccount, so every
// request made with it is authorised by the installed RBAC, not by system:masters. The
// API server adds the ServiceAccount's groups (system:serviceaccounts and
// system:serviceaccounts:hookkeeper-system) as it does for the account's own token.
func OperatorConfig(admin *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: OperatorUser()}
	return cfg
}

// rbacKustomizationFile is the part of config/rbac/kustomization.yaml that
// InstallOperatorRBAC understands; any other field (patches, a name prefix...) is an
// error rather than silently not applied.
type rbacKustomizationFile struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// ReadOperatorRBAC reads the installer's RBAC: every resource of
// config/rbac/kustomization.yaml under repoRoot, with the placeholder namespace
// "system" replaced by OperatorNamespace in metadata and in ServiceAccount subjects, as
// config/default's `namespace:` does.
func ReadOperatorRBAC(repoRoot string) ([]*unstructured.Unstructured, error) {
	path := filepath.Join(repoRoot, rbacKustomization)
	data, err := os.ReadFile(path) //nolint:gosec // a file of this repository
	if err != nil {
		return nil, fmt.Errorf("read the installer's RBAC: %w", err)
	}
	var k rbacKustomizationFile
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return nil, fmt.Errorf("%s: only resources are supported here: %w", path, err)
	}
	if len(k.Resources) == 0 {
		return nil, fmt.Errorf("%s lists no resources", path)
	}
	var out []*unstructured.Unstructured
	for _, res := range k.Resources {
		if filepath.IsAbs(res) || strings.Contains(res, "..") || !strings.HasSuffix(res, ".yaml") {
			return nil, fmt.Errorf("%s: resource %q is not a YAML file in config/rbac", path, res)
		}
		docs, err := demo.ReadManifests(filepath.Join(filepath.Dir(path), res))
		if err != nil {
			return nil, err
		}
		for _, u := range docs {
			if err := setOperatorNamespace(u); err != nil {
				return nil, fmt.Errorf("%s: %w", res, err)
			}
			out = append(out, u)
		}
	}
	return out, nil
}

// setOperatorNamespace moves a config/rbac object from the placeholder namespace to
// OperatorNamespace.
func setOperatorNamespace(u *unstructured.Unstructured) error {
	if u.GetNamespace() != "" {
		u.SetNamespace(OperatorNamespace)
	}
	subjects, found, err := unstructured.NestedSlice(u.Object, "subjects")
	if err != nil || !found {
		return err //nolint:wrapcheck // nil, or a malformed subjects field named by the caller
	}
	for i, s := range subjects {
		m, ok := s.(map[string]any)
		if !ok {
			return fmt.Errorf("%s %s: subject %d is not an object", u.GetKind(), u.GetName(), i)
		}
		if m["kind"] == "ServiceAccount" && m["namespace"] == rbacPlaceholderNamespace {
			m["namespace"] = OperatorNamespace
		}
	}
	return unstructured.SetNestedSlice(u.Object, subjects, "subjects") //nolint:wrapcheck // cannot fail on a slice just read
}

// InstallOperatorRBAC creates OperatorNamespace and applies the installer's RBAC (see
// ReadOperatorRBAC) with admin, then waits until the RBAC authorizer has seen it: until
// the operator's ServiceAccount may watch WebhookEndpoints and create its hash key
// Secret.
func InstallOperatorRBAC(ctx context.Context, admin *rest.Config, repoRoot string) error {
	objs, err := ReadOperatorRBAC(repoRoot)
	if err != nil {
		return err
	}
	c, err := client.New(admin, client.Options{})
	if err != nil {
		return fmt.Errorf("build client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", OperatorNamespace, err)
	}
	for _, u := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
			client.FieldOwner(rbacFieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return waitOperatorAllowed(ctx, OperatorConfig(admin), []authorizationv1.ResourceAttributes{
		{Group: "hookkeeper.dev", Resource: "webhookendpoints", Verb: "watch"},
		{Resource: "secrets", Verb: "create", Namespace: OperatorNamespace},
	})
}

// waitOperatorAllowed asks, as the operator, until every attribute is allowed.
func waitOperatorAllowed(ctx context.Context, operator *rest.Config, attrs []authorizationv1.ResourceAttributes) error {
	cs, err := kubernetes.NewForConfig(operator)
	if err != nil {
		return fmt.Errorf("build client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, a := range attrs {
		for {
			review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
				&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a}},
				metav1.CreateOptions{})
			if err == nil && review.Status.Allowed {
				break
			}
			if err == nil {
				err = errors.New("not allowed")
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s may not %s %s in %q after the RBAC of config/rbac was applied: %w",
					OperatorUser(), a.Verb, a.Resource, a.Namespace, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
