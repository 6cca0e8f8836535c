// Command main computes the Clerk test vector of hookkeeper's
// internal/provider/testdata/providers/clerk.json with Svix's official Go library,
// which Clerk's docs name for verifying its webhooks (Clerk sends them through Svix).
//
//	go run .
//
// It signs the body with webhook.Sign at a fixed svix-timestamp, checks the result with
// the same library's VerifyIgnoringTimestamp, and prints the vector.
package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"time"

	svix "github.com/svix/svix-webhooks/go"
)

const (
	// A test key made for this vector (base64 of "hookkeeper clerk test key 0001!!").
	secret = "whsec_aG9va2tlZXBlciBjbGVyayB0ZXN0IGtleSAwMDAxISE="
	// Another key of the same form, for the vector suite's wrong-secret case.
	wrongSecret = "whsec_aG9va2tlZXBlciBjbGVyayB3cm9uZyBrZXkgMDAwMiEh"
	msgID       = "msg_2hkZq8Vw3YcB1o9tLmFfRrXk0Pq"
	// One second after the event's timestamp (ms) below.
	signedAt = 1654012592
)

// body is the user.created example of Clerk's webhook docs, abridged, as one line.
const body = `{"data":{"birthday":"","created_at":1654012591514,"email_addresses":[{"email_address":"example@example.org","id":"idn_29w83yL7CwVlJXylYLxcslromF1","linked_to":[],"object":"email_address","verification":{"status":"verified","strategy":"ticket"}}],"external_id":"567772","first_name":"Example","id":"user_29w83sxmDNGwOuEthce5gg56FcC","last_name":"Example","object":"user","primary_email_address_id":"idn_29w83yL7CwVlJXylYLxcslromF1","updated_at":1654012591835,"username":null},"event_attributes":{"http_request":{"client_ip":"0.0.0.0","user_agent":"Mozilla/5.0"}},"instance_id":"ins_29w83sxmDNGwOuEthce5gg56FcC","object":"event","timestamp":1654012591835,"type":"user.created"}`

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
	vector := map[string]any{
		"name":            "clerk-svix-go",
		"provider":        "Clerk",
		"published":       false,
		"source":          "computed with Svix's official Go library github.com/svix/svix-webhooks@v1.44.0 (package go), webhook.NewWebhook(secret).Sign(svix-id, svix-timestamp, body), checked with its VerifyIgnoringTimestamp; generator: testdata/sdk/clerk/main.go. The body is the user.created example of Clerk's webhook docs, abridged; the key is a test key",
		"secret":          secret,
		"wrongSecret":     wrongSecret,
		"body":            body,
		"headers":         map[string]string{"svix-id": msgID, "svix-timestamp": ts, "svix-signature": sig},
		"signatureHeader": "svix-signature",
		"timestampHeader": "svix-timestamp",
		"idHeader":        "svix-id",
		"now":             signedAt + 8,
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(vector); err != nil {
		panic(err)
	}
}
