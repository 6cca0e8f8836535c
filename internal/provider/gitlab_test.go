package provider

import (
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

func TestGitLabToken(t *testing.T) {
	v := vectorNamed(t, "gitlab-token")
	verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
	expectHeaderValues(t, verifier, v, HeaderGitLabToken, []headerCase{
		{"the token", v.Secret, ""},
		{"surrounding spaces are not part of a header value", " " + v.Secret + " ", ""},
		{"a prefix of the token", v.Secret[:len(v.Secret)-1], signature.ReasonMismatch},
		{"the token and more", v.Secret + "0", signature.ReasonMismatch},
		{"another case", strings.ToUpper(v.Secret), signature.ReasonMismatch},
		{"the token's SHA-256", signature.BodyDigest([]byte(v.Secret)), signature.ReasonMismatch},
		{"Bearer form", "Bearer " + v.Secret, signature.ReasonMismatch},
	})

	t.Run("every active secret of a rotation is compared", func(t *testing.T) {
		now := time.Unix(v.Now, 0)
		rotation := mustNew(t, v.spec(),
			signature.Secret{Value: "the-old-token", ExpiresAt: now.Add(time.Hour)},
			signature.Secret{Value: v.Secret},
			signature.Secret{Value: "an-expired-token", ExpiresAt: now.Add(-time.Hour)})
		expectHeaderValues(t, rotation, v, HeaderGitLabToken, []headerCase{
			{"the current token", v.Secret, ""},
			{"the old token", "the-old-token", ""},
			{"an expired token", "an-expired-token", signature.ReasonMismatch},
		})
	})

	// The weakness of the scheme, pinned down: the token binds nothing, so a request with
	// the token and any body verifies. Only TLS and who can read the token protect it;
	// a webhook with a signing token should use type StandardWebhooks instead.
	t.Run("the token does not bind the body", func(t *testing.T) {
		req := v.request()
		req.Body = []byte(`{"object_kind":"merge_request","object_attributes":{"action":"merge","url":"http://example.com/forged"}}`)
		verified, err := verifier.Open(req)
		if err != nil {
			t.Fatalf("a changed body under the token: %v", err)
		}
		if verified.Signed()[signature.SignedDigest] != signature.BodyDigest(req.Body) {
			t.Fatal("signed.digest is not the digest of the body received")
		}
		p, _ := Lookup(ProviderGitLab)
		if !strings.Contains(p.Doc.Signed, "any body") {
			t.Fatalf("Doc.Signed does not say that the token binds no body: %q", p.Doc.Signed)
		}
	})
}

func TestGitLabPresets(t *testing.T) {
	v := vectorNamed(t, "gitlab-token")
	unsigned := map[string]string{"X-Gitlab-Event": "Merge Request Hook", "X-Gitlab-Event-UUID": "13792a34-cac6-4fda-95a8-c58e00a3954e"}
	want := presetValues{
		ID:        signature.BodyDigest([]byte(v.Body)),
		Type:      "merge_request.open",
		EntityKey: "http://example.com/diaspora/merge_requests/1",
	}
	expectPresetValues(t, presetValuesOf(t, vectorSigned(v), unsigned), want)
	unsigned["X-Gitlab-Event-UUID"] = "another"
	expectPresetValues(t, presetValuesOf(t, vectorSigned(v), unsigned), want)

	now := time.Unix(v.Now, 0)
	for _, tc := range []struct {
		name, body string
		want       presetValues
	}{
		{"push: no object_attributes", `{"object_kind":"push","ref":"refs/heads/master","project":{"path_with_namespace":"mike/diaspora"}}`,
			presetValues{Type: "push", EntityKey: "mike/diaspora"}},
		{"pipeline: object_attributes without action", `{"object_kind":"pipeline","object_attributes":{"id":31,"status":"success"},"project":{"path_with_namespace":"g/p"}}`,
			presetValues{Type: "pipeline", EntityKey: "g/p"}},
		{"a null action", `{"object_kind":"issue","object_attributes":{"action":null,"url":"http://example.com/g/p/-/issues/1"}}`,
			presetValues{Type: "issue", EntityKey: "http://example.com/g/p/-/issues/1"}},
		{"a system hook without object_kind", `{"event_name":"project_create","path_with_namespace":"g/p"}`,
			presetValues{Type: "project_create"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := customSigners[ProviderGitLab](t, []byte(tc.body), now)
			tc.want.ID = signature.BodyDigest([]byte(tc.body))
			expectPresetValues(t, presetValuesOf(t, s, nil), tc.want)
		})
	}
}
