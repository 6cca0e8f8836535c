package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// maxTerminationMessage bounds the part of a failed pod's message copied into status.
const maxTerminationMessage = 1024

// reconcileMigration runs the schema migration Job for this binary's schema version and
// lets the Deployment proceed only once it completed. A Job is never updated (its pod
// template is immutable): when what it migrated changes (schema, image, database) the old
// Job is deleted and a new one runs.
func (r *WebhookEndpointReconciler) reconcileMigration(ctx context.Context, st *state) error {
	ep := st.ep
	opts := r.resourceOptions(st)
	url := st.values[ep.Spec.Database.URLSecretRef.Name+"/"+ep.Spec.Database.URLSecretRef.Key]
	hash := resources.MigrationHash(st.hashKey, ep, opts, url)
	target := resources.MigrationTarget(st.hashKey, ep, opts, url)
	desired := resources.MigrationJob(ep, opts, hash, target)

	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKeyFromObject(desired), job)
	switch {
	case apierrors.IsNotFound(err):
		// Another endpoint's Job migrating the same schema: wait for it, then find the
		// schema current. Endpoints created together on one schema run one Job.
		if other, err := r.activeMigration(ctx, ep.Namespace, target); err != nil {
			return err
		} else if other != "" {
			st.requeue(st.now.Add(2 * time.Second))
			st.setCondition(v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, ReasonMigrating,
				fmt.Sprintf("migration Job %s, which migrates the same schema %q of the same database, is running; this endpoint waits for it",
					other, ep.Spec.Database.Schema))
			return errStop
		}
		if schemaCurrent(ctx, &st.db, ep, opts, string(url)) {
			return r.alreadyMigrated(ctx, st)
		}
		if _, err := r.apply(ctx, ep, desired); err != nil {
			return err
		}
		r.event(ep, corev1.EventTypeNormal, EventMigrationStarted, "Migrate",
			"migration Job %s started (schema version %d, schema %q)", desired.Name, store.SchemaVersion, ep.Spec.Database.Schema)
		return r.migrating(st, desired.Name)
	case err != nil:
		return fmt.Errorf("get Job %s: %w", desired.Name, err)
	}
	if !metav1IsControlledBy(job, ep) {
		st.setCondition(v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, ReasonMigrationFailed,
			fmt.Sprintf("Job %s/%s exists and is not owned by this WebhookEndpoint; delete or rename it", job.Namespace, job.Name))
		return errStop
	}
	if job.Annotations[resources.AnnotationMigrationHash] != hash {
		if job.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete stale migration Job %s: %w", job.Name, err)
			}
		}
		st.requeue(st.now.Add(2 * time.Second))
		return r.migrating(st, desired.Name)
	}
	switch {
	case jobCondition(job, batchv1.JobComplete):
		if st.transitioned(v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, ReasonMigrated) {
			r.event(ep, corev1.EventTypeNormal, EventMigrationSucceeded, "Migrate",
				"migration Job %s completed: schema %q is at version %d", job.Name, ep.Spec.Database.Schema, store.SchemaVersion)
		}
		st.setCondition(v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, ReasonMigrated,
			fmt.Sprintf("schema %q is at version %d (Job %s)", ep.Spec.Database.Schema, store.SchemaVersion, job.Name))
		ep.Status.SchemaVersion = store.SchemaVersion
		return r.pruneMigrationJobs(ctx, ep, job.Name)
	case jobCondition(job, batchv1.JobFailed):
		// The Job's own reason first (a deadline, the backoff limit), then what the
		// last attempt said.
		detail := jobFailure(job)
		if last := r.terminationMessage(ctx, job); last != "" {
			if detail != "" {
				detail += "; "
			}
			detail += "last attempt: " + last
		}
		msg := fmt.Sprintf("migration Job %s/%s failed", job.Namespace, job.Name)
		if job.Status.Failed > 0 {
			msg += fmt.Sprintf(" after %d attempt%s", job.Status.Failed, plural(job.Status.Failed))
		}
		if detail != "" {
			msg += ": " + detail
		}
		msg += "; fix the cause and delete the Job to retry"
		if st.transitioned(v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, ReasonMigrationFailed) {
			r.event(ep, corev1.EventTypeWarning, EventMigrationFailed, "Migrate", "%s", msg)
		}
		st.setCondition(v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, ReasonMigrationFailed, msg)
		return errStop
	case job.Status.Failed > 0:
		return r.migrationFailing(ctx, st, job)
	default:
		return r.migrating(st, job.Name)
	}
}

// schemaCurrent reports whether the endpoint's schema is already at this operator's
// schema version or newer, read with the endpoint's database URL as the sink state is
// (endpointDB). Then no migration Job is needed: endpoints sharing a schema (a
// receiver pool's members, usually) would each run one that changes nothing. Only for
// the operator's own receiver image, whose binary needs exactly store.SchemaVersion;
// another image may need a newer one. Any failure to read means "run the Job", which
// migrates or says why it cannot.
func schemaCurrent(ctx context.Context, db *endpointDB, ep *v1alpha1.WebhookEndpoint, opts resources.Options, url string) bool {
	if ep.Spec.Receiver.Image != "" && ep.Spec.Receiver.Image != opts.Image {
		return false
	}
	err := db.read(ctx, url, func(ctx context.Context, conn *pgx.Conn) error {
		return store.CheckSchema(ctx, conn, ep.Spec.Database.Schema)
	})
	return err == nil
}

// activeMigration names a running migration Job in namespace with target, "" if none.
func (r *WebhookEndpointReconciler) activeMigration(ctx context.Context, namespace, target string) (string, error) {
	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.InNamespace(namespace), client.MatchingLabels{resources.LabelMigrationTarget: target}); err != nil {
		return "", fmt.Errorf("list migration Jobs: %w", err)
	}
	for i := range jobs.Items {
		job := &jobs.Items[i]
		if job.DeletionTimestamp.IsZero() && !jobCondition(job, batchv1.JobComplete) && !jobCondition(job, batchv1.JobFailed) {
			return job.Name, nil
		}
	}
	return "", nil
}

// alreadyMigrated records a schema found at this version without a Job, and deletes
// finished Jobs of earlier versions, as a completed Job does.
func (r *WebhookEndpointReconciler) alreadyMigrated(ctx context.Context, st *state) error {
	ep := st.ep
	if st.transitioned(v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, ReasonMigrated) {
		r.event(ep, corev1.EventTypeNormal, EventMigrationSucceeded, "Migrate",
			"schema %q is already at version %d: no migration Job needed", ep.Spec.Database.Schema, store.SchemaVersion)
	}
	st.setCondition(v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, ReasonMigrated,
		fmt.Sprintf("schema %q is at version %d (found so by the operator; no Job needed)", ep.Spec.Database.Schema, store.SchemaVersion))
	ep.Status.SchemaVersion = store.SchemaVersion
	return r.pruneMigrationJobs(ctx, ep, "")
}

// migrationFailing reports a Job that is retrying after failed attempts: the attempt
// count and the last attempt's termination message, so the cause shows within one
// attempt instead of only once the Job gives up. A Warning Event marks each new failed
// attempt (the attempt number in the previous condition tells which ones were seen).
func (r *WebhookEndpointReconciler) migrationFailing(ctx context.Context, st *state, job *batchv1.Job) error {
	failed := job.Status.Failed
	attempt := fmt.Sprintf("attempt %d", failed)
	if job.Spec.BackoffLimit != nil {
		attempt += fmt.Sprintf(" of %d", *job.Spec.BackoffLimit+1)
	}
	attempt += " failed"
	if detail := r.terminationMessage(ctx, job); detail != "" {
		attempt += ": " + detail
	}
	msg := fmt.Sprintf("migration Job %s is retrying (schema %q, version %d): %s", job.Name,
		st.ep.Spec.Database.Schema, store.SchemaVersion, attempt)
	if prev := st.previous(v1alpha1.ConditionDatabaseMigrated); prev == nil ||
		prev.Reason != ReasonMigrationFailing || failedAttempts(prev.Message) != failed {
		r.event(st.ep, corev1.EventTypeWarning, EventMigrationAttemptFailed, "Migrate", "migration Job %s: %s", job.Name, attempt)
	}
	st.setCondition(v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, ReasonMigrationFailing, msg)
	if st.previous(v1alpha1.ConditionReceiverAvailable) == nil {
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, ReasonWaiting,
			"the receiver starts once the database migration completed")
	}
	return errStop
}

// failedAttempts is the attempt number a MigrationFailing message reports (0 if none).
func failedAttempts(message string) int32 {
	_, after, ok := strings.Cut(message, "): attempt ")
	if !ok {
		return 0
	}
	var n int32
	if _, err := fmt.Sscanf(after, "%d", &n); err != nil {
		return 0
	}
	return n
}

// jobFailure is the Job's own account of why it failed (deadline exceeded, backoff
// limit), for when no pod left a termination message.
func jobFailure(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return strings.TrimSpace(strings.TrimSuffix(c.Reason+": "+c.Message, ": "))
		}
	}
	return ""
}

func plural(n int32) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func (r *WebhookEndpointReconciler) migrating(st *state, jobName string) error {
	st.setCondition(v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, ReasonMigrating,
		fmt.Sprintf("migration Job %s is bringing schema %q to version %d", jobName, st.ep.Spec.Database.Schema, store.SchemaVersion))
	if st.previous(v1alpha1.ConditionReceiverAvailable) == nil {
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, ReasonWaiting,
			"the receiver starts once the database migration completed")
	}
	return errStop
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// terminationMessage is the last failed migration pod's termination message (the
// migrate command writes why it failed, one line, with no database password; the
// container falls back to its log's tail when it wrote none). A failed container that
// left neither is described by its reason and exit code.
func (r *WebhookEndpointReconciler) terminationMessage(ctx context.Context, job *batchv1.Job) string {
	var pods corev1.PodList
	if err := r.reader().List(ctx, &pods, client.InNamespace(job.Namespace),
		client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return ""
	}
	var last *corev1.ContainerStateTerminated
	for i := range pods.Items {
		pod := &pods.Items[i]
		// A Job of the same name deleted a moment ago may still have pods.
		if !metav1.IsControlledBy(pod, job) {
			continue
		}
		for _, cs := range pod.Status.ContainerStatuses {
			t := cs.State.Terminated
			if t == nil || t.ExitCode == 0 {
				continue
			}
			if last == nil || t.FinishedAt.After(last.FinishedAt.Time) {
				last = t
			}
		}
	}
	if last == nil {
		return ""
	}
	message := oneLine(last.Message)
	if message == "" {
		return fmt.Sprintf("container exited with code %d (%s) and left no termination message; see the pod's log", last.ExitCode, last.Reason)
	}
	return message
}

// pruneMigrationJobs deletes this endpoint's finished migration Jobs of earlier schema
// versions once the current one completed; they have no TTL, so nothing else would.
func (r *WebhookEndpointReconciler) pruneMigrationJobs(ctx context.Context, ep *v1alpha1.WebhookEndpoint, current string) error {
	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.InNamespace(ep.Namespace),
		client.MatchingLabels(resources.Labels(ep, resources.ComponentMigration))); err != nil {
		return fmt.Errorf("list migration Jobs: %w", err)
	}
	for i := range jobs.Items {
		old := &jobs.Items[i]
		if old.Name == current || !metav1IsControlledBy(old, ep) || old.Status.Active > 0 || !old.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.Delete(ctx, old, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete old migration Job %s: %w", old.Name, err)
		}
	}
	return nil
}
