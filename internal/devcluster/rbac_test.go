package devcluster

import (
	"path/filepath"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestReadOperatorRBAC reads the installer's RBAC from config/rbac: the generated
// manager-role with the finalizers rule blockOwnerDeletion needs, and every namespaced
// object and ServiceAccount subject moved to OperatorNamespace.
func TestReadOperatorRBAC(t *testing.T) {
	objs, err := ReadOperatorRBAC(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string][]string{}
	for _, u := range objs {
		kinds[u.GetKind()] = append(kinds[u.GetKind()], u.GetName())
		if ns := u.GetNamespace(); ns != "" && ns != OperatorNamespace {
			t.Errorf("%s %s in namespace %q, want %q", u.GetKind(), u.GetName(), ns, OperatorNamespace)
		}
		switch u.GetKind() {
		case "ClusterRole":
			if u.GetName() != "manager-role" {
				continue
			}
			var role rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role); err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Contains(r.APIGroups, "hookkeeper.dev") &&
					slices.Contains(r.Resources, "webhookendpoints/finalizers") && slices.Contains(r.Verbs, "update")
			}) {
				t.Errorf("manager-role does not grant update on webhookendpoints/finalizers: %+v", role.Rules)
			}
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding // subjects and roleRef are all that is read
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b); err != nil {
				t.Fatal(err)
			}
			want := rbacv1.Subject{Kind: "ServiceAccount", Name: OperatorServiceAccount, Namespace: OperatorNamespace}
			if !slices.Equal(b.Subjects, []rbacv1.Subject{want}) {
				t.Errorf("%s %s subjects = %+v, want %+v", u.GetKind(), u.GetName(), b.Subjects, want)
			}
		}
	}
	for kind, name := range map[string]string{
		"ServiceAccount": OperatorServiceAccount, "ClusterRole": "manager-role", "ClusterRoleBinding": "manager-rolebinding",
		"Role": "hash-key-role",
	} {
		if !slices.Contains(kinds[kind], name) {
			t.Errorf("no %s %s in %v", kind, name, kinds)
		}
	}
	if !slices.Contains(kinds["Role"], "leader-election-role") {
		t.Errorf("no leader-election-role in %v", kinds["Role"])
	}
}
