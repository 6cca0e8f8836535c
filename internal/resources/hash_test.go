package resources

import (
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestConfigHash(t *testing.T) {
	ep := endpoint()
	r, _ := Render(ep, now)
	base := map[string][]byte{"stripe/current": []byte("whsec_a"), "stripe/previous": []byte("whsec_b"), "db-app/uri": []byte("postgres://x")}
	h0 := ConfigHash(testKey, r, base)
	with := func(k, v string) map[string][]byte {
		m := map[string][]byte{}
		for kk, vv := range base {
			m[kk] = vv
		}
		m[k] = []byte(v)
		return m
	}
	scaled := endpoint()
	scaled.Spec.Receiver.Replicas = ptr.To[int32](7)
	scaled.Spec.Receiver.Image = "other:1"
	scaled.Spec.NetworkPolicy.Enabled = ptr.To(false)
	scaled.Spec.Exposure = &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{Host: "x.example"}}
	rs, _ := Render(scaled, now)
	if string(rs.JSON) != string(r.JSON) {
		t.Errorf("operator-only fields leak into the pods' config:\n%s\n%s", rs.JSON, r.JSON)
	}
	ep2 := endpoint()
	ep2.Spec.Receiver.Path = "/other"
	r2, _ := Render(ep2, now)
	for _, tc := range []struct {
		name   string
		hash   string
		differ bool
	}{
		{"same inputs", ConfigHash(testKey, r, base), false},
		{"unrelated key in a referenced Secret", ConfigHash(testKey, r, with("stripe/unrelated", "x")), false},
		{"rotated signing secret", ConfigHash(testKey, r, with("stripe/current", "whsec_c")), true},
		{"new database URL", ConfigHash(testKey, r, with("db-app/uri", "postgres://y")), true},
		{"config change", ConfigHash(testKey, r2, base), true},
		{"secret expired", func() string { r3, _ := Render(ep, now.Add(2*time.Hour)); return ConfigHash(testKey, r3, base) }(), true},
	} {
		if (tc.hash != h0) != tc.differ {
			t.Errorf("%s: hash differs=%v, want %v", tc.name, tc.hash != h0, tc.differ)
		}
	}
	if strings.Contains(h0, "whsec") || len(h0) != 64 {
		t.Errorf("hash %q is not a sha256 hex digest", h0)
	}
	// Keyed: without the per-install key the annotation is no digest anyone can
	// recompute from guessed values.
	if plain := testsupport.UnkeyedHash(8, configParts(r, base)...); h0 == plain {
		t.Error("ConfigHash is the plain SHA-256 of its inputs: weak secrets can be guessed offline")
	}
	if ConfigHash([]byte("another-install-key-0123456789ab"), r, base) == h0 {
		t.Error("ConfigHash does not depend on the key")
	}
}

// testKey stands for the per-install hash key.
var testKey = []byte("0123456789abcdef0123456789abcdef")

// configParts are ConfigHash's inputs in order.
func configParts(r Rendered, values map[string][]byte) [][]byte {
	parts := [][]byte{r.JSON}
	for _, ref := range r.Refs {
		id := ref.Name + "/" + ref.Key
		parts = append(parts, []byte(ref.EnvVar), []byte(id), values[id])
	}
	return parts
}
