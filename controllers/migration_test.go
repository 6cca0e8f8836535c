package controllers_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// testMigrationSkippedWhenCurrent: on a database whose schema is already at this
// operator's version the endpoint counts as migrated without a Job and its receivers
// start; a schema behind, or a receiver image of another version, still gets its Job;
// a second endpoint on a schema whose Job runs waits for that Job and runs none.
func (e *env) testMigrationSkippedWhenCurrent(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	dbURL := testsupport.MigratedDatabase(t, v1alpha1.DefaultSchema)
	// A schema an older hookkeeper migrated to version 1.
	conn, err := pgx.Connect(e.ctx, dbURL)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close(e.ctx) }()
	_, err = conn.Exec(e.ctx, `CREATE SCHEMA behind;
CREATE TABLE behind.goose_db_version (id serial PRIMARY KEY, version_id bigint NOT NULL, is_applied boolean NOT NULL, tstamp timestamp DEFAULT now());
INSERT INTO behind.goose_db_version (version_id, is_applied) VALUES (0, true), (1, true)`)
	g.Expect(err).NotTo(HaveOccurred())
	e.secret(t, ns, "stripe", map[string]string{"current": "whsec_current"})
	e.secret(t, ns, "db-app", map[string]string{"uri": dbURL})

	current := e.create(t, validEndpoint(ns, "current"))
	cur := e.waitCondition(t, current, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, controllers.ReasonMigrated)
	g.Expect(condition(cur, v1alpha1.ConditionDatabaseMigrated).Message).To(ContainSubstring("no Job needed"))
	g.Expect(cur.Status.SchemaVersion).To(Equal(store.SchemaVersion))
	err = e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(current)), &batchv1.Job{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no migration Job for a schema at this version: %v", err)
	g.Eventually(func() error {
		return e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(current)), &appsv1.Deployment{})
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	behind := validEndpoint(ns, "behind")
	behind.Spec.Database.Schema = "behind"
	pinned := validEndpoint(ns, "pinned")
	pinned.Spec.Receiver.Image = "registry.example/hookkeeper-receiver:v9.9.9"
	for _, ep := range []*v1alpha1.WebhookEndpoint{behind, pinned} {
		e.create(t, ep)
		e.waitCondition(t, ep, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, controllers.ReasonMigrating)
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(ep)), &batchv1.Job{})).To(Succeed(), ep.Name)
	}

	// Another endpoint on the schema behind's Job migrates waits for that Job.
	second := validEndpoint(ns, "behind-too")
	second.Spec.Database.Schema = "behind"
	e.create(t, second)
	cur = e.waitCondition(t, second, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, controllers.ReasonMigrating)
	g.Expect(condition(cur, v1alpha1.ConditionDatabaseMigrated).Message).To(ContainSubstring(
		"migration Job " + resources.MigrationJobName(behind) + ", which migrates the same schema"))
	err = e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(second)), &batchv1.Job{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no second Job while one migrates the schema: %v", err)
	// That Job migrates the schema and completes: the waiting endpoint finds it current.
	_, err = conn.Exec(e.ctx, `INSERT INTO behind.goose_db_version (version_id, is_applied) VALUES ($1, true)`, store.SchemaVersion)
	g.Expect(err).NotTo(HaveOccurred())
	e.completeJob(t, behind)
	cur = e.waitCondition(t, second, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, controllers.ReasonMigrated)
	g.Expect(condition(cur, v1alpha1.ConditionDatabaseMigrated).Message).To(ContainSubstring("no Job needed"))
	err = e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(second)), &batchv1.Job{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no Job after the other completed: %v", err)
}
