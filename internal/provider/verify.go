package provider

import (
	"net/http"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Helpers of the providers whose verifier is their own code (Adyen, GitLab, HubSpot,
// Linear, Mailgun, Twilio) over the shared signature.Keyring.

// opener is the half of a signature.Verifier such a provider writes: Open.
type opener interface {
	Open(req signature.Request) (*signature.Verified, error)
}

// verifierOf makes an opener a signature.Verifier: Verify is Open with the verified
// request dropped.
type verifierOf struct{ opener }

func (v verifierOf) Verify(req signature.Request) error {
	_, err := v.Open(req)
	return err
}

// headerSignature reads the one MAC that a provider with its own verifier (Adyen's
// header form, Linear, Twilio) sends in a header: the header must be sent once
// (signature.SingleHeader) and decode under enc to a MAC of size bytes. form names the
// MAC in the error, e.g. "a hex HMAC-SHA256". Comparing it is the Keyring's.
func headerSignature(h http.Header, name string, enc v1alpha1.SignatureEncoding, size int, form string) ([]byte, *signature.Error) {
	value, ferr := signature.SingleHeader(h, name)
	if ferr != nil {
		return nil, ferr
	}
	sig, ok := signature.DecodeSignature(enc, value, size)
	if !ok {
		return nil, signature.Fail(signature.ReasonMalformedHeader, "header %s is not %s", name, form)
	}
	return sig, nil
}
