package resources

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

func jsonNumber(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestRenderDropsExpiredSecretsAndRenumbers(t *testing.T) {
	ep := endpoint()
	ep.Spec.SigningSecrets = []v1alpha1.SigningSecret{
		{SecretKeyRef: sel("s", "old"), ExpiresAt: at(now.Add(-time.Minute))},
		{SecretKeyRef: sel("s", "current")},
		{SecretKeyRef: sel("s", "exact"), ExpiresAt: at(now)},
		{SecretKeyRef: sel("s", "next"), ExpiresAt: at(now.Add(time.Minute))},
	}
	ep.Spec.Delivery.SigningSecretRef = ptr.To(sel("deliver", "key"))
	r, err := Render(ep, now)
	if err != nil {
		t.Fatal(err)
	}
	wantRefs := []SecretRef{
		{Field: "spec.signingSecrets[1].secretKeyRef", Name: "s", Key: "current", EnvVar: config.EnvSigningSecretPrefix + "0"},
		{Field: "spec.signingSecrets[3].secretKeyRef", Name: "s", Key: "next", EnvVar: config.EnvSigningSecretPrefix + "1"},
		{Field: "spec.database.urlSecretRef", Name: "db-app", Key: "uri", EnvVar: config.EnvDatabaseURL},
		{Field: "spec.delivery.signingSecretRef", Name: "deliver", Key: "key", EnvVar: config.EnvDeliverySecret},
	}
	if len(r.Refs) != len(wantRefs) {
		t.Fatalf("refs = %+v", r.Refs)
	}
	for i := range wantRefs {
		if r.Refs[i] != wantRefs[i] {
			t.Errorf("ref %d = %+v, want %+v", i, r.Refs[i], wantRefs[i])
		}
	}
	var doc struct {
		APIVersion, Kind string
		Metadata         struct{ Name, Namespace, ResourceVersion string }
		Spec             v1alpha1.WebhookEndpointSpec
	}
	if err := json.Unmarshal(r.JSON, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.APIVersion != "hookkeeper.dev/v1alpha1" || doc.Kind != "WebhookEndpoint" ||
		doc.Metadata.Name != "orders" || doc.Metadata.Namespace != "shop" || doc.Metadata.ResourceVersion != "" {
		t.Errorf("rendered header = %+v", doc)
	}
	keys := []string{}
	for _, s := range doc.Spec.SigningSecrets {
		keys = append(keys, s.SecretKeyRef.Key)
	}
	if strings.Join(keys, ",") != "current,next" {
		t.Errorf("rendered signing secrets = %v, want current,next (index i is %s<i>)", keys, config.EnvSigningSecretPrefix)
	}
	if next, ok := NextExpiry(ep, now); !ok || !next.Equal(now.Add(time.Minute)) {
		t.Errorf("NextExpiry = %v %v", next, ok)
	}
	if _, ok := NextExpiry(ep, now.Add(time.Hour)); ok {
		t.Error("no expiry after the last one")
	}
	if got := SecretNames(ep); strings.Join(got, ",") != "db-app,deliver,s" {
		t.Errorf("SecretNames = %v", got)
	}
}
