package resources

import (
	"crypto/md5"  //nolint:gosec // looking for digests an attacker could compute
	"crypto/sha1" //nolint:gosec // looking for digests an attacker could compute
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// auditDigests are encodings of v (and digests of it) that would let a reader of the
// object test guesses of the value offline.
func auditDigests(v string) map[string]string {
	out := map[string]string{
		"value":        v,
		"base64 value": base64.StdEncoding.EncodeToString([]byte(v)),
		"hex value":    hex.EncodeToString([]byte(v)),
	}
	s256 := sha256.Sum256([]byte(v))
	s1 := sha1.Sum([]byte(v)) //nolint:gosec
	m5 := md5.Sum([]byte(v))  //nolint:gosec
	s512 := sha512.Sum512([]byte(v))
	for name, sum := range map[string][]byte{"sha256": s256[:], "sha1": s1[:], "md5": m5[:], "sha512": s512[:]} {
		out[name+" hex"] = hex.EncodeToString(sum)
		out[name+" hex prefix"] = hex.EncodeToString(sum)[:16]
		out[name+" base64"] = base64.StdEncoding.EncodeToString(sum)
		out[name+" base64url"] = base64.RawURLEncoding.EncodeToString(sum)
	}
	return out
}

// Every object the operator renders for an endpoint (Deployment, migration Job, Service,
// ServiceAccount, NetworkPolicy) carries no Secret value and no unkeyed digest of one:
// in annotations, labels or env.
func TestNoUnkeyedSecretDigestInRenderedObjects(t *testing.T) {
	ep := endpoint()
	ep.Spec.Delivery.SigningSecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "delivery"}, Key: "key"}
	values := map[string][]byte{
		"stripe/current":  []byte("whsec_audit_current_value"),
		"stripe/previous": []byte("whsec_audit_previous_value"),
		"db-app/uri":      []byte("postgres://app:audit-password@db.shop.svc:5432/app"),
		"delivery/key":    []byte("whsec_audit_delivery_key"),
	}
	r, err := Render(ep, now)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	opts := Options{Image: "img:1", Rendered: r, ConfigHash: ConfigHash(key, r, values)}
	url := values["db-app/uri"]
	objs := map[string]any{
		"Deployment":     Deployment(ep, opts),
		"Job":            MigrationJob(ep, opts, MigrationHash(key, ep, opts, url), MigrationTarget(key, ep, opts, url)),
		"Service":        EndpointReceivers(ep, opts).Service(),
		"ServiceAccount": EndpointReceivers(ep, opts).ServiceAccount(),
		"NetworkPolicy":  NetworkPolicy(ep),
	}
	for kind, obj := range objs {
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		doc := strings.ToLower(string(raw))
		for ref, v := range values {
			for what, enc := range auditDigests(string(v)) {
				if strings.Contains(doc, strings.ToLower(enc)) {
					t.Errorf("%s holds the %s of Secret key %s", kind, what, ref)
				}
			}
		}
	}
}
