package controllers_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// testSecretsNotCached runs after the scenarios above (rotation included, which rolls
// the pods through the Secret watch): through all of them the manager read and watched
// Secrets as metadata only, never as full objects, and the metadata it caches carries no
// annotations (kubectl's last-applied-configuration holds a Secret's data).
func (e *env) testSecretsNotCached(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "applied", Namespace: ns, Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Secret","data":{"current":"d2hzZWNfbGVhaw=="},"stringData":{"x":"whsec_leak"}}`,
		}},
		Data: map[string][]byte{"current": []byte("whsec_leak")},
	}
	g.Expect(e.k8s.Create(e.ctx, s)).To(Succeed())
	g.Eventually(func(g Gomega) {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		g.Expect(e.cache.Get(e.ctx, client.ObjectKeyFromObject(s), m)).To(Succeed())
		g.Expect(m.ResourceVersion).To(Equal(s.ResourceVersion))
		g.Expect(m.Annotations).To(BeEmpty(), "annotations of a Secret in the cache")
		g.Expect(m.ManagedFields).To(BeEmpty(), "managed fields of a Secret in the cache")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	full, metadata := e.cacheUse.counts("Secret")
	g.Expect(full).To(BeZero(), "the manager read or watched full Secrets through its cache")
	g.Expect(metadata).To(BeNumerically(">", 0), "the manager watches Secret metadata")
}

// testKeyedHashes: the config hash on the pod template and the migration hash on the Job
// are HMACs under the install's key (a Secret the operator created in its namespace),
// not a plain SHA-256 anyone who can read a Deployment could test guesses against.
func (e *env) testKeyedHashes(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.withSecrets(t, ns)
	ep := e.ready(t, validEndpoint(ns, "keyed"))
	cur := e.endpoint(g, ep)

	keySecret := &corev1.Secret{}
	g.Expect(e.k8s.Get(e.ctx, key(controllers.DefaultKeyNamespace, controllers.HashKeySecretName), keySecret)).To(Succeed())
	hashKey := keySecret.Data["key"]
	g.Expect(hashKey).To(HaveLen(resources.HashKeyBytes))
	g.Expect(keySecret.Immutable).To(HaveValue(BeTrue()))

	rendered, err := resources.Render(cur, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	values := map[string][]byte{"stripe/current": []byte("whsec_current"), "db-app/uri": []byte("postgres://app@db.example:5432/app")}
	got := configHash(e.deployment(g, ep))
	g.Expect(got).To(Equal(resources.ConfigHash(hashKey, rendered, values)), "config hash keyed by the install's key")
	parts := [][]byte{rendered.JSON}
	for _, ref := range rendered.Refs {
		id := ref.Name + "/" + ref.Key
		parts = append(parts, []byte(ref.EnvVar), []byte(id), values[id])
	}
	g.Expect(got).NotTo(Equal(testsupport.UnkeyedHash(8, parts...)), "config hash is the plain SHA-256 of config and secret values")
	for _, v := range values {
		sum := sha256.Sum256(v)
		g.Expect(got).NotTo(Equal(hex.EncodeToString(sum[:])))
	}

	job := &batchv1.Job{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(ep)), job)).To(Succeed())
	migration := job.Annotations[resources.AnnotationMigrationHash]
	db := cur.Spec.Database
	g.Expect(migration).To(Equal(resources.MigrationHash(hashKey, cur, resources.Options{Image: testImage}, values["db-app/uri"])))
	g.Expect(migration).NotTo(Equal(testsupport.UnkeyedHash(4, []byte(db.Schema), []byte(testImage),
		[]byte(db.URLSecretRef.Name), []byte(db.URLSecretRef.Key), values["db-app/uri"])),
		"migration hash is the plain SHA-256 of the database URL")

	// The migration hash still moves with the database URL: a new URL runs the
	// migration again (and the pods roll once it completed).
	s := &corev1.Secret{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, "db-app"), s)).To(Succeed())
	newURL := []byte("postgres://app@db2.example:5432/app")
	s.Data["uri"] = newURL
	g.Expect(e.k8s.Update(e.ctx, s)).To(Succeed())
	g.Eventually(func(g Gomega) {
		job := &batchv1.Job{}
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(ep)), job)).To(Succeed())
		g.Expect(job.Annotations[resources.AnnotationMigrationHash]).To(
			Equal(resources.MigrationHash(hashKey, cur, resources.Options{Image: testImage}, newURL)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.completeJob(t, ep)
	values["db-app/uri"] = newURL
	g.Eventually(func(g Gomega) {
		g.Expect(configHash(e.deployment(g, ep))).To(Equal(resources.ConfigHash(hashKey, rendered, values)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(resources.ConfigHash(hashKey, rendered, values)).NotTo(Equal(got))
}

// testKeyNamesStayPrivate: a missing key is reported by its own name only; the other
// keys of the Secret (whose names can say what it holds) appear neither in status nor
// in Events.
func (e *env) testKeyNamesStayPrivate(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.secret(t, ns, "stripe", map[string]string{"previous": "whsec_previous", "prod-admin-api-token": "rk_live_x"})
	e.secret(t, ns, "db-app", map[string]string{"uri": "postgres://db/app"})
	ep := e.create(t, validEndpoint(ns, "key-names"))

	cur := e.waitCondition(t, ep, v1alpha1.ConditionSecretsResolved, metav1.ConditionFalse, controllers.ReasonKeyNotFound)
	msg := condition(cur, v1alpha1.ConditionSecretsResolved).Message
	g.Expect(msg).To(ContainSubstring(`has no key "current"`))
	for _, other := range []string{"previous", "prod-admin-api-token"} {
		g.Expect(msg).NotTo(ContainSubstring(other), "status names another key of the Secret")
		for _, c := range cur.Status.Conditions {
			g.Expect(c.Message).NotTo(ContainSubstring(other), "condition %s", c.Type)
		}
	}
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(e.k8s.List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		found := false
		for _, ev := range list.Items {
			if ev.Reason != controllers.EventSecretMissing {
				continue
			}
			found = true
			g.Expect(ev.Note).To(ContainSubstring(`has no key "current"`))
			g.Expect(strings.Contains(ev.Note, "previous") || strings.Contains(ev.Note, "prod-admin-api-token")).
				To(BeFalse(), "Event names another key of the Secret: %s", ev.Note)
		}
		g.Expect(found).To(BeTrue(), "a SecretMissing event")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}
