// Command main computes the test vectors of the providers whose webhooks Svix delivers:
// Clerk's (hookkeeper's internal/provider/testdata/providers/clerk.json) and Resend's
// (resend.json). Each is signed with Svix's official Go library, which Clerk's and
// Resend's docs name for verifying their webhooks, at a fixed svix-timestamp, checked
// with the same library's VerifyIgnoringTimestamp, and printed.
//
//	go run . clerk
//	go run . resend
//
// Resend's signature is checked with Resend's official Go SDK as well. resend-go's
// Webhooks.Verify judges the svix-timestamp against the wall clock, so it checks a copy
// of the request signed now.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	resend "github.com/resend/resend-go/v2"
	svix "github.com/svix/svix-webhooks/go"
)

// vector is one provider's Svix-signed request, but for its signature.
type vector struct {
	name, provider string
	// secret is a test key made for this vector; wrongSecret is another key of the same
	// form, for the vector suite's wrong-secret case.
	secret, wrongSecret string
	msgID               string
	// signedAt is the svix-timestamp; verifyAfter, how long after it the suite verifies.
	signedAt, verifyAfter int64
	body, source          string
	// check, when set, checks the body and key with the provider's own SDK.
	check func(wh *svix.Webhook, v vector) error
}

var vectors = map[string]vector{
	"clerk": {
		name:     "clerk-svix-go",
		provider: "Clerk",
		// base64 of "hookkeeper clerk test key 0001!!" and "hookkeeper clerk wrong key 0002!!".
		secret:      "whsec_aG9va2tlZXBlciBjbGVyayB0ZXN0IGtleSAwMDAxISE=",
		wrongSecret: "whsec_aG9va2tlZXBlciBjbGVyayB3cm9uZyBrZXkgMDAwMiEh",
		msgID:       "msg_2hkZq8Vw3YcB1o9tLmFfRrXk0Pq",
		// One second after the event's timestamp (ms) in the body.
		signedAt:    1654012592,
		verifyAfter: 8,
		// The user.created example of Clerk's webhook docs, abridged, as one line.
		body:   `{"data":{"birthday":"","created_at":1654012591514,"email_addresses":[{"email_address":"example@example.org","id":"idn_29w83yL7CwVlJXylYLxcslromF1","linked_to":[],"object":"email_address","verification":{"status":"verified","strategy":"ticket"}}],"external_id":"567772","first_name":"Example","id":"user_29w83sxmDNGwOuEthce5gg56FcC","last_name":"Example","object":"user","primary_email_address_id":"idn_29w83yL7CwVlJXylYLxcslromF1","updated_at":1654012591835,"username":null},"event_attributes":{"http_request":{"client_ip":"0.0.0.0","user_agent":"Mozilla/5.0"}},"instance_id":"ins_29w83sxmDNGwOuEthce5gg56FcC","object":"event","timestamp":1654012591835,"type":"user.created"}`,
		source: "computed with Svix's official Go library github.com/svix/svix-webhooks@v1.44.0 (package go), webhook.NewWebhook(secret).Sign(svix-id, svix-timestamp, body), checked with its VerifyIgnoringTimestamp; generator: testdata/sdk/svix/main.go (clerk). The body is the user.created example of Clerk's webhook docs, abridged; the key is a test key",
	},
	"resend": {
		name:     "resend-svix-go",
		provider: "Resend",
		// base64 of "hookkeeper resend test key 0001!" and "hookkeeper resend wrong key 0002".
		secret:      "whsec_aG9va2tlZXBlciByZXNlbmQgdGVzdCBrZXkgMDAwMSE=",
		wrongSecret: "whsec_aG9va2tlZXBlciByZXNlbmQgd3Jvbmcga2V5IDAwMDI=",
		msgID:       "msg_2cvVn5dPq3Tb8xWz1HkL0mRt9Ya",
		// 2024-02-22T23:41:12Z, the event's created_at.
		signedAt:    1708645272,
		verifyAfter: 5,
		// The email.delivered example of Resend's "Event types" docs page, as one line.
		body:   `{"type":"email.delivered","created_at":"2024-02-22T23:41:12.126Z","data":{"created_at":"2024-02-22T23:41:11.894719+00:00","email_id":"56761188-7520-42d8-8898-ff6fc54ce618","from":"Acme <onboarding@resend.dev>","to":["delivered@resend.dev"],"subject":"Sending this example"}}`,
		source: "computed with Svix's official Go library github.com/svix/svix-webhooks@v1.44.0 (package go), webhook.NewWebhook(secret).Sign(svix-id, svix-timestamp, body), checked with its VerifyIgnoringTimestamp, and the same body and key signed at run time checked with Resend's official Go SDK github.com/resend/resend-go/v2@v2.28.0 Webhooks.Verify; generator: testdata/sdk/svix/main.go (resend). The body is the email.delivered example of Resend's \"Event types\" docs page; the key is a test key",
		check:  checkResend,
	},
}

// checkResend has Resend's SDK accept the vector's body and key signed now, and refuse
// them under the wrong secret.
func checkResend(wh *svix.Webhook, v vector) error {
	now := time.Now()
	sig, err := wh.Sign(v.msgID, now, []byte(v.body))
	if err != nil {
		return fmt.Errorf("sign now: %w", err)
	}
	client := resend.NewClient("re_not_used_for_verification")
	opts := resend.VerifyWebhookOptions{
		Payload:       v.body,
		Headers:       resend.WebhookHeaders{Id: v.msgID, Timestamp: strconv.FormatInt(now.Unix(), 10), Signature: sig},
		WebhookSecret: v.secret,
	}
	if err := client.Webhooks.Verify(&opts); err != nil {
		return fmt.Errorf("resend-go refused the vector's key: %w", err)
	}
	opts.WebhookSecret = v.wrongSecret
	if err := client.Webhooks.Verify(&opts); err == nil {
		return errors.New("resend-go accepted the wrong secret")
	}
	return nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run . clerk|resend")
		os.Exit(2)
	}
	v, ok := vectors[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "no Svix vector for %q (clerk or resend)\n", os.Args[1])
		os.Exit(2)
	}
	wh, err := svix.NewWebhook(v.secret)
	if err != nil {
		panic(err)
	}
	sig, err := wh.Sign(v.msgID, time.Unix(v.signedAt, 0), []byte(v.body))
	if err != nil {
		panic(err)
	}
	ts := strconv.FormatInt(v.signedAt, 10)
	h := http.Header{}
	h.Set("svix-id", v.msgID)
	h.Set("svix-timestamp", ts)
	h.Set("svix-signature", sig)
	if err := wh.VerifyIgnoringTimestamp([]byte(v.body), h); err != nil {
		panic(err)
	}
	if v.check != nil {
		if err := v.check(wh, v); err != nil {
			panic(err)
		}
	}
	out := map[string]any{
		"name":            v.name,
		"provider":        v.provider,
		"published":       false,
		"source":          v.source,
		"secret":          v.secret,
		"wrongSecret":     v.wrongSecret,
		"body":            v.body,
		"headers":         map[string]string{"svix-id": v.msgID, "svix-timestamp": ts, "svix-signature": sig},
		"signatureHeader": "svix-signature",
		"timestampHeader": "svix-timestamp",
		"idHeader":        "svix-id",
		"now":             v.signedAt + v.verifyAfter,
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
