package controllers_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/devcluster"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestInstalledRBAC runs the operator as its ServiceAccount, authorised by the RBAC the
// installer applies (config/rbac, read by devcluster.ReadOperatorRBAC as `hookkeeper
// dev` does), against an API server with the OwnerReferencesPermissionEnforcement
// admission plugin (testsupport.StartEnvtest enables it). It runs after or before
// TestWebhookEndpointController, never beside it: each test stops its manager.
func TestInstalledRBAC(t *testing.T) {
	cfg, scheme, k8s := startAPIServer(t)
	e := &env{ctx: context.Background(), k8s: k8s, scheme: scheme}
	t.Run("LeasesOnlyInItsOwnNamespace", func(t *testing.T) { e.testLeases(t, cfg) })
	t.Run("InstalledRoleRunsAnEndpoint", func(t *testing.T) { e.testInstalledRole(t, cfg) })
	t.Run("WithoutFinalizersRuleOwnerReferencesAreForbidden", func(t *testing.T) { e.testWithoutFinalizers(t, cfg) })
}

// isFinalizersRule matches the rule that grants update on webhookendpoints/finalizers.
func isFinalizersRule(r any) bool {
	m, _ := r.(map[string]any)
	res, _ := m["resources"].([]any)
	return slices.Contains(res, any("webhookendpoints/finalizers"))
}

// installRBAC applies the installer's RBAC, without the manager-role rules that drop
// matches, and waits until the authorizer has seen it (and, with drop, that the
// operator may no longer update webhookendpoints/finalizers). It returns the question
// "may the operator do this?", asked as the operator.
func (e *env) installRBAC(t *testing.T, cfg *rest.Config, drop func(any) bool) func(Gomega, authorizationv1.ResourceAttributes) bool {
	t.Helper()
	objs, err := devcluster.ReadOperatorRBAC(testsupport.RepoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: devcluster.OperatorNamespace}}
	if err := e.k8s.Create(e.ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dropped := 0
	for _, u := range objs {
		if u.GetKind() == "ClusterRole" && u.GetName() == "manager-role" && drop != nil {
			rules, _, _ := unstructured.NestedSlice(u.Object, "rules")
			kept := slices.DeleteFunc(rules, drop)
			dropped = len(rules) - len(kept)
			if err := unstructured.SetNestedSlice(u.Object, kept, "rules"); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.k8s.Apply(e.ctx, client.ApplyConfigurationFromUnstructured(u),
			client.FieldOwner("rbac-test"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	if drop != nil && dropped == 0 {
		t.Fatal("config/rbac/role.yaml has no rule to drop")
	}
	cs, err := kubernetes.NewForConfig(devcluster.OperatorConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(g Gomega, attrs authorizationv1.ResourceAttributes) bool {
		review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(e.ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return review.Status.Allowed
	}
	group := v1alpha1.GroupVersion.Group
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(allowed(g, authorizationv1.ResourceAttributes{Group: group, Resource: "webhookendpoints", Verb: "watch"})).To(BeTrue())
		if drop != nil {
			g.Expect(allowed(g, authorizationv1.ResourceAttributes{
				Group: group, Resource: "webhookendpoints", Subresource: "finalizers", Verb: "update",
			})).To(BeFalse())
		}
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return allowed
}

// testLeases: the operator's only use of Leases is its own leader election, a Role in
// its own namespace (config/rbac/leader_election_role.yaml). The ClusterRole must not
// let it write Leases elsewhere: kube-system holds the control plane's leader-election
// Leases, kube-node-lease the nodes' heartbeats. An operator that may update them could
// take leadership from kube-controller-manager or mark nodes alive or dead.
func (e *env) testLeases(t *testing.T, cfg *rest.Config) {
	allowed := e.installRBAC(t, cfg, nil)
	lease := func(ns, verb string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Namespace: ns, Group: "coordination.k8s.io", Resource: "leases",
			Verb: verb, Name: "kube-controller-manager"}
	}
	NewWithT(t).Eventually(func(g Gomega) {
		// Its own leader election still works.
		g.Expect(allowed(g, lease(devcluster.OperatorNamespace, "update"))).To(BeTrue())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g := NewWithT(t)
	for _, ns := range []string{"kube-system", "kube-node-lease", "some-tenant"} {
		for _, verb := range []string{"update", "delete", "create", "patch"} {
			g.Expect(allowed(g, lease(ns, verb))).To(BeFalse(), "operator may %s Leases in %s", verb, ns)
		}
	}
}

// testInstalledRole runs the operator as devcluster runs it (RunInProcess with the
// impersonating config) and drives an endpoint to Ready: every read, watch and write
// of the reconciler, the hash key Secret and the Events pass the installed RBAC.
func (e *env) testInstalledRole(t *testing.T, cfg *rest.Config) {
	e.installRBAC(t, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- controllers.RunInProcess(ctx, devcluster.OperatorConfig(cfg), controllers.Options{ReceiverImage: testImage})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	}()

	ns := e.namespaceWithSecrets(t)
	ep := e.ready(t, validEndpoint(ns, "orders"))
	d := &appsv1.Deployment{}
	if err := e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(ep)), d); err != nil {
		t.Fatal(err)
	}
	ownedBy(t, d, ep)
	// Created by the operator in its own namespace, through the hash key Role.
	if err := e.k8s.Get(e.ctx, key(devcluster.OperatorNamespace, controllers.HashKeySecretName), &corev1.Secret{}); err != nil {
		t.Errorf("hash key Secret in %s: %v", devcluster.OperatorNamespace, err)
	}
}

// testWithoutFinalizers removes the webhookendpoints/finalizers rule from the installed
// ClusterRole: the first owned object's apply is forbidden by the admission plugin, for
// blockOwnerDeletion, and reconcile fails saying so.
func (e *env) testWithoutFinalizers(t *testing.T, cfg *rest.Config) {
	e.installRBAC(t, cfg, isFinalizersRule)
	t.Cleanup(func() { e.installRBAC(t, cfg, nil) })
	operator, err := client.New(devcluster.OperatorConfig(cfg), client.Options{Scheme: e.scheme})
	if err != nil {
		t.Fatal(err)
	}
	r := &controllers.WebhookEndpointReconciler{
		Client: operator, Scheme: e.scheme, APIReader: operator,
		Options: controllers.Options{ReceiverImage: testImage, KeyNamespace: devcluster.OperatorNamespace},
	}
	ns := e.namespaceWithSecrets(t)
	ep := e.create(t, validEndpoint(ns, "orders"))

	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ep)})
	if err == nil {
		t.Fatal("reconcile succeeded without update on webhookendpoints/finalizers")
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "blockOwnerDeletion") {
		t.Fatalf("reconcile: %v; want Forbidden naming blockOwnerDeletion", err)
	}
	t.Logf("as expected: %v", err)
	// Nothing owned was created.
	sa := &corev1.ServiceAccount{}
	if err := e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(ep)), sa); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceAccount %s: %v, want NotFound", resources.ReceiverName(ep), err)
	}
}
