package provider

import (
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

func TestClerkPresets(t *testing.T) {
	v := vectorNamed(t, "clerk-svix-go")
	got := presetValuesOf(t, vectorSigned(v), nil)
	expectPresetValues(t, got, presetValues{
		ID:         v.Headers["svix-id"],
		Type:       "user.created",
		EntityKey:  "user_29w83sxmDNGwOuEthce5gg56FcC",
		OccurredAt: presetPtr(time.Unix(1654012591, 0)), // timestamp 1654012591835 ms
	})
	// svix-id is signed: the id is the one that verified, and a changed svix-id does not
	// verify at all (the vector suite's "id" case), so a replay cannot become new.
}

// The published Standard Webhooks vector (svix-* names) verifies under Clerk and Resend
// too: they are that scheme, not a look-alike.
func TestSvixProvidersVerifyTheStandardWebhooksReference(t *testing.T) {
	v := vectorNamed(t, "svix-headers-reference")
	for _, typ := range []v1alpha1.ProviderType{ProviderClerk, ProviderResend} {
		t.Run(string(typ), func(t *testing.T) {
			verifier := mustNew(t, v1alpha1.ProviderSpec{Type: typ}, signature.Secret{Value: v.Secret})
			verified, err := verifier.Open(v.request())
			if err != nil {
				t.Fatal(err)
			}
			if got := verified.Signed()[signature.SignedID]; got != v.Headers["svix-id"] {
				t.Fatalf("signed.id = %q, want the svix-id", got)
			}
			req := v.request()
			req.Now = req.Now.Add(v1alpha1.DefaultTolerance + time.Minute)
			expectReason(t, verifier.Verify(req), signature.ReasonTimestampOutOfTolerance, v)
		})
	}
}
