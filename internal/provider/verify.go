package provider

import (
	"hash"
	"net/http"
	"time"

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

// endpointKeys is what such an opener checks a request with: the keyring of the
// endpoint's secrets and the endpoint's signed-timestamp tolerance.
type endpointKeys struct {
	keys      *signature.Keyring
	tolerance time.Duration
}

// hmacKeyringVerifier is the Provider.Verifier of a provider whose own opener checks
// HMACs under newHash with the keyring of the endpoint's secrets (keys encoded as enc):
// it builds that keyring and hands it, with the endpoint's tolerance, to newOpener.
func hmacKeyringVerifier(newHash func() hash.Hash, enc v1alpha1.KeyEncoding, newOpener func(endpointKeys) opener) func(v1alpha1.ProviderSpec, []signature.Secret, time.Duration) (signature.Verifier, error) {
	return func(_ v1alpha1.ProviderSpec, secrets []signature.Secret, tolerance time.Duration) (signature.Verifier, error) {
		keys, err := signature.NewHMACKeyring(newHash, enc, secrets)
		if err != nil {
			return nil, err
		}
		return verifierOf{newOpener(endpointKeys{keys: keys, tolerance: tolerance})}, nil
	}
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

// activeHeaderSignature opens a request whose one MAC travels in header name (Linear,
// Twilio): the keys of ring active at req.Now, then the MAC read by headerSignature,
// decoded under enc to ring's signature size. form names the MAC in the error.
func activeHeaderSignature(ring *signature.Keyring, req signature.Request, name string, enc v1alpha1.SignatureEncoding, form string) ([]signature.Key, []byte, *signature.Error) {
	keys, ferr := ring.Active(req.Now)
	if ferr != nil {
		return nil, nil, ferr
	}
	sig, ferr := headerSignature(req.Header, name, enc, ring.SignatureSize(), form)
	if ferr != nil {
		return nil, nil, ferr
	}
	return keys, sig, nil
}
