package resources

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMigrationJob(t *testing.T) {
	ep := endpoint()
	opts := options(t, ep, now)
	target := MigrationTarget(testKey, ep, opts, []byte("postgres://a"))
	j := MigrationJob(ep, opts, MigrationHash(testKey, ep, opts, []byte("postgres://a")), target)
	if j.Labels[LabelMigrationTarget] != target || len(target) > 63 || j.Spec.Template.Labels[LabelMigrationTarget] != "" {
		t.Errorf("Job labels %v, pod labels %v: the target labels the Job only, as a valid label value", j.Labels, j.Spec.Template.Labels)
	}
	if j.Name != MigrationJobName(ep) || j.Spec.TTLSecondsAfterFinished != nil || j.Spec.BackoffLimit == nil {
		t.Errorf("job %s ttl %v backoff %v", j.Name, j.Spec.TTLSecondsAfterFinished, j.Spec.BackoffLimit)
	}
	pod := j.Spec.Template.Spec
	c := pod.Containers[0]
	if strings.Join(c.Command, " ") != "/hookkeeper-receiver" || strings.Join(c.Args, " ") != "migrate" || pod.RestartPolicy != corev1.RestartPolicyNever || *pod.AutomountServiceAccountToken {
		t.Errorf("command %v args %v restart %s", c.Command, c.Args, pod.RestartPolicy)
	}
	if !*c.SecurityContext.ReadOnlyRootFilesystem || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("container = %+v", c)
	}
	names := []string{}
	for _, e := range c.Env {
		names = append(names, e.Name)
		if e.Name == config.EnvDatabaseURL && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Key != "uri") {
			t.Errorf("DATABASE_URL must come from the Secret: %+v", e)
		}
	}
	if strings.Join(names, ",") != config.EnvEndpoint+","+config.EnvDatabaseURL {
		t.Errorf("env = %v: the migration needs only the endpoint and the database", names)
	}
	h := MigrationHash(testKey, ep, opts, []byte("postgres://a"))
	for name, other := range map[string]string{
		"database URL": MigrationHash(testKey, ep, opts, []byte("postgres://b")),
		"schema": func() string {
			e := endpoint()
			e.Spec.Database.Schema = "other"
			return MigrationHash(testKey, e, opts, []byte("postgres://a"))
		}(),
		"image": MigrationHash(testKey, ep, Options{Image: "other"}, []byte("postgres://a")),
	} {
		if other == h {
			t.Errorf("a new %s must run the migration again", name)
		}
	}
	plain := testsupport.UnkeyedHash(4, []byte(ep.Spec.Database.Schema), []byte(image(ep.Spec.Receiver.Image, opts)),
		[]byte(ep.Spec.Database.URLSecretRef.Name), []byte(ep.Spec.Database.URLSecretRef.Key), []byte("postgres://a"))
	if h == plain || h == testsupport.UnkeyedHash(8, []byte(ep.Spec.Database.Schema), []byte(image(ep.Spec.Receiver.Image, opts)),
		[]byte(ep.Spec.Database.URLSecretRef.Name), []byte(ep.Spec.Database.URLSecretRef.Key), []byte("postgres://a")) {
		t.Error("MigrationHash is the plain SHA-256 of its inputs: the database URL can be guessed offline")
	}
	if MigrationHash([]byte("another-install-key-0123456789ab"), ep, opts, []byte("postgres://a")) == h {
		t.Error("MigrationHash does not depend on the key")
	}
	ep2 := endpoint()
	ep2.Spec.Receiver.Replicas = ptr.To[int32](5)
	if MigrationHash(testKey, ep2, opts, []byte("postgres://a")) != h {
		t.Error("scaling the receiver must not re-run the migration")
	}

	// Another endpoint on the same database and schema shares the target, not the hash.
	other := endpoint()
	other.Name = "refunds"
	other.Spec.Database.URLSecretRef.Name = "another-secret-same-url"
	if MigrationTarget(testKey, other, opts, []byte("postgres://a")) != target {
		t.Error("endpoints on one schema of one database must share the migration target")
	}
	for name, differs := range map[string]string{
		"database URL": MigrationTarget(testKey, ep, opts, []byte("postgres://b")),
		"image":        MigrationTarget(testKey, ep, Options{Image: "other"}, []byte("postgres://a")),
		"key":          MigrationTarget([]byte("another-install-key-0123456789ab"), ep, opts, []byte("postgres://a")),
	} {
		if differs == target {
			t.Errorf("another %s must be another migration target", name)
		}
	}
}
