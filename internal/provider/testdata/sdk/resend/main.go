// Command main computes the Resend test vector of hookkeeper's
// internal/provider/testdata/providers/resend.json. Resend sends its webhooks through
// Svix, so the vector is signed with Svix's official Go library, and the signature is
// checked with Resend's official Go SDK as well as with Svix's library.
//
//	go run .
//
// resend-go's Webhooks.Verify judges the svix-timestamp against the wall clock, so it
// checks a copy of the request signed now; the printed vector is signed at a fixed
// svix-timestamp and checked with Svix's VerifyIgnoringTimestamp.
package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"time"

	resend "github.com/resend/resend-go/v2"
	svix "github.com/svix/svix-webhooks/go"
)

const (
	// A test key made for this vector (base64 of "hookkeeper resend test key 0001!").
	secret = "whsec_aG9va2tlZXBlciByZXNlbmQgdGVzdCBrZXkgMDAwMSE="
	// Another key of the same form, for the vector suite's wrong-secret case.
	wrongSecret = "whsec_aG9va2tlZXBlciByZXNlbmQgd3Jvbmcga2V5IDAwMDI="
	msgID       = "msg_2cvVn5dPq3Tb8xWz1HkL0mRt9Ya"
	// 2024-02-22T23:41:12Z, the event's created_at.
	signedAt = 1708645272
)

// body is the email.delivered example of Resend's "Event types" docs page, as one line.
const body = `{"type":"email.delivered","created_at":"2024-02-22T23:41:12.126Z","data":{"created_at":"2024-02-22T23:41:11.894719+00:00","email_id":"56761188-7520-42d8-8898-ff6fc54ce618","from":"Acme <onboarding@resend.dev>","to":["delivered@resend.dev"],"subject":"Sending this example"}}`

func main() {
	wh, err := svix.NewWebhook(secret)
	if err != nil {
		panic(err)
	}
	sig, err := wh.Sign(msgID, time.Unix(signedAt, 0), []byte(body))
	if err != nil {
		panic(err)
	}
	ts := strconv.Itoa(signedAt)
	h := http.Header{}
	h.Set("svix-id", msgID)
	h.Set("svix-timestamp", ts)
	h.Set("svix-signature", sig)
	if err := wh.VerifyIgnoringTimestamp([]byte(body), h); err != nil {
		panic(err)
	}

	// Resend's SDK accepts the same body and key signed now.
	now := time.Now()
	nowSig, err := wh.Sign(msgID, now, []byte(body))
	if err != nil {
		panic(err)
	}
	client := resend.NewClient("re_not_used_for_verification")
	if err := client.Webhooks.Verify(&resend.VerifyWebhookOptions{
		Payload:       body,
		Headers:       resend.WebhookHeaders{Id: msgID, Timestamp: strconv.FormatInt(now.Unix(), 10), Signature: nowSig},
		WebhookSecret: secret,
	}); err != nil {
		panic(err)
	}
	if err := client.Webhooks.Verify(&resend.VerifyWebhookOptions{
		Payload:       body,
		Headers:       resend.WebhookHeaders{Id: msgID, Timestamp: strconv.FormatInt(now.Unix(), 10), Signature: nowSig},
		WebhookSecret: wrongSecret,
	}); err == nil {
		panic("resend-go accepted the wrong secret")
	}

	vector := map[string]any{
		"name":            "resend-svix-go",
		"provider":        "Resend",
		"published":       false,
		"source":          "computed with Svix's official Go library github.com/svix/svix-webhooks@v1.44.0 (package go), webhook.NewWebhook(secret).Sign(svix-id, svix-timestamp, body), checked with its VerifyIgnoringTimestamp, and the same body and key signed at run time checked with Resend's official Go SDK github.com/resend/resend-go/v2@v2.28.0 Webhooks.Verify; generator: testdata/sdk/resend/main.go. The body is the email.delivered example of Resend's \"Event types\" docs page; the key is a test key",
		"secret":          secret,
		"wrongSecret":     wrongSecret,
		"body":            body,
		"headers":         map[string]string{"svix-id": msgID, "svix-timestamp": ts, "svix-signature": sig},
		"signatureHeader": "svix-signature",
		"timestampHeader": "svix-timestamp",
		"idHeader":        "svix-id",
		"now":             signedAt + 5,
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(vector); err != nil {
		panic(err)
	}
}
